"""A new user's first calls after the CLI became the package ``kimik3/cli/`` (issue 42 point 4):
every command's ``--help``, ``python -m kimik3 --help``, the console script's target, and the
names ``kimik3.cli`` exported before the split (``git show 9526839:kimik3/cli.py``)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

import kimik3.cli
from kimik3.cli import main

ROOT = Path(__file__).resolve().parents[1]

# kimik3.cli.__all__ before the split (9526839:kimik3/cli.py line 125); README's examples use them
BEFORE = ["build_agent", "build_engine", "engine_options", "main", "parse_engine_arg", "run_script", "start_engine"]


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """(words after ``kimik3``, command) of every command and subcommand under ``group``."""
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in sorted(group.commands.items()):
        out.append(((*path, name), command))
        if isinstance(command, click.Group):
            out.extend(commands(command, (*path, name)))
    return out


def test_every_command_has_a_help_page() -> None:
    found = commands(main)
    names = [" ".join(words) for words, _ in found]
    # the commands README.md and kimik3.cli's docstring name (new ones get their help checked too)
    assert {"approve", "chat", "eval", "eval compare", "eval replay", "eval run", "preflight", "replay", "resume",
            "run", "serve", "show", "undo", "verify"} <= set(names), names  # fmt: skip
    for words, command in found:
        result = CliRunner().invoke(main, [*words, "--help"], prog_name="kimik3")
        assert result.exit_code == 0, (words, result.output)
        assert result.output.startswith(f"Usage: kimik3 {' '.join(words)} "), result.output
        first = (command.help or "").strip().splitlines()[0]
        assert first.split("(")[0].split(":")[0][:30] in " ".join(result.output.split()), (words, first)
        assert CliRunner().invoke(main, [*words, "-h"], prog_name="kimik3").output == result.output


def test_python_dash_m_kimik3_help_lists_the_commands() -> None:
    done = subprocess.run([sys.executable, "-m", "kimik3", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("Usage: kimik3 [OPTIONS] COMMAND [ARGS]...")
    listed = [line.split()[0] for line in done.stdout.split("Commands:\n")[1].splitlines() if line.strip()]
    assert listed == sorted(main.commands)


def test_the_console_script_is_the_cli_group() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib is 3.11+; kimik3 runs on 3.10
    found = re.search(r'^\[project\.scripts\]\nkimik3 = "([\w.]+):(\w+)"$', text, re.M)
    assert found is not None, "pyproject.toml lost the kimik3 console script"
    module, attribute = found.groups()
    assert getattr(importlib.import_module(module), attribute) is main


def test_every_cli_module_imports_and_exports_what_it_lists() -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(kimik3.cli.__path__))
    assert names == ["engine", "eval", "harness", "progress", "recorded", "replay", "run", "scripts", "serve", "sessions",
                     "verify"]
    for name in names:
        module = importlib.import_module(f"kimik3.cli.{name}")
        assert all(hasattr(module, n) for n in getattr(module, "__all__", [])), name


def test_the_names_kimik3_cli_exported_before_the_split_still_work() -> None:
    assert kimik3.cli.__all__ == BEFORE
    assert all(callable(getattr(kimik3.cli, n)) for n in BEFORE)
    from kimik3.cli import build_agent, build_engine, engine_options, run_script, start_engine  # README's import

    assert [f.__module__ for f in (build_agent, build_engine, run_script, start_engine)] == ["kimik3.cli.scripts"] * 4
    assert engine_options.__module__ == "kimik3.cli.engine"
