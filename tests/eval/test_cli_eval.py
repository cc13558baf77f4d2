"""``kimik3 eval SUITE``: its output lines, its files, its usage errors, its sandbox options
(the harness's, taken once: run these with ``-W error::UserWarning``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3._pricing import format_usd
from kimik3.cli import main
from kimik3.eval import read_results

from ..procs import BWRAP_WORKS, MODES, alive_with, marker
from .helpers import answer_has, calls, write_task

_CLEAN = {k: None for k in ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH")}
BWRAP_LINE = "sandbox: bwrap (workspace read-write, the rest read-only, secrets hidden, /tmp private, network off)"
NONE_LINE = "sandbox: none (commands run unsandboxed, with your rights)"


def invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["eval", *args], env=_CLEAN)
    return r.exit_code, r.output


def test_eval_runs_a_suite_and_prints_each_attempt_then_the_summary(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "a-read", "First line of x.txt?", answer_has("ex"), {"x.txt": "ex\n"})
    write_task(suite, "b-plain", "Hi", answer_has("Hello"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([calls(("read_file", {"path": "x.txt"})), "It is: ex", "Bye"]))
    out = tmp_path / "out"
    code, text = invoke(str(suite), "--out", str(out), "--script", str(script), "--plain", "--price", "3,0.3,15")
    assert code == 0, text
    first, *lines = text.splitlines()
    if BWRAP_WORKS:  # the default: auto
        assert first == BWRAP_LINE
    results, _ = read_results(out / "results.jsonl")
    assert results[0].cost is not None and results[0].cost > 0
    assert re.fullmatch(rf"\[1/2\] a-read #1 passed · 2 turns, [0-9]+\.[0-9] s, {re.escape(format_usd(results[0].cost))}",
                        lines[0])
    assert lines[1].startswith("[2/2] b-plain #1 FAILED (completed) · 1 turn, ")
    assert lines[2] == "pass rate: 50.0% (1/2 attempts, 2 tasks; pass@1 50.0%)"
    assert lines[3].startswith("cost: $") and "cached prompt tokens n/a; valid tool calls 100.0%" in lines[3]
    assert lines[4] == f"report: {out / 'report.md'} {out / 'report.html'}"
    meta = json.loads((out / "eval.json").read_text())
    assert meta["pricing"] == {"input": 3.0, "cached_input": 0.3, "output": 15.0, "cache_write": None,
                               "cache_write_1h": None} and meta["tools"] == "full"
    assert meta["model"] == "scripted-k3" and meta["suite"] == "suite"
    assert meta["sandbox"] == first and json.loads((out / "summary.json").read_text())["sandbox"] == first
    # continued: nothing left, the summary printed again
    code, text = invoke(str(suite), "--out", str(out), "--script", str(script), "--plain", "--price", "3,0.3,15")
    assert code == 0 and text.splitlines()[1] == "pass rate: 50.0% (1/2 attempts, 2 tasks; pass@1 50.0%)"
    # other options into the same --out: refused, naming the difference
    code, text = invoke(str(suite), "--out", str(out), "--script", str(script), "--plain")
    assert code == 1 and "holds results of another run (pricing" in text


def test_eval_usage_errors(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "t", "x", "true")
    script = tmp_path / "s.json"
    script.write_text('["x"]')
    code, text = invoke(str(suite), "--script", str(script))
    assert code == 2 and "Missing option '--out'" in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--tasks", "zz")
    assert code == 2 and "no task of" in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--price", "3,0.3")
    assert code == 2 and "expected INPUT,CACHED,OUTPUT" in text
    code, text = invoke(str(tmp_path), "--out", str(tmp_path / "o"), "--script", str(script))
    assert code == 2 and "a task folder without a task.toml" in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"))
    assert code == 2 and "no engine" in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--sandbox", "box")
    assert code == 2 and "Invalid value for '--sandbox': 'box' is not one of 'auto', 'bwrap', 'landlock', 'none'." in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--allow-read",
                        str(tmp_path / "nowhere"))
    assert code == 2 and "Invalid value for '--allow-read'" in text and "does not exist" in text
    assert not (tmp_path / "o").exists()  # nothing ran


def test_a_sandbox_that_cannot_run_is_named_before_anything_runs(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3.tools.coding import _sandbox

    monkeypatch.setattr(_sandbox, "_bwrap", lambda: None)  # as on a machine without bubblewrap
    suite = tmp_path / "suite"
    write_task(suite, "t", "x", "true")
    script = tmp_path / "s.json"
    script.write_text('["x"]')
    r = CliRunner().invoke(main, ["eval", str(suite), "--out", str(tmp_path / "o"), "--script", str(script),
                                  "--sandbox", "bwrap"], env=_CLEAN)
    assert r.exit_code == 1 and r.output.startswith("error: SandboxUnavailableError: sandbox='bwrap' but bubblewrap "
                                                    "(bwrap) is not installed; to fix it, install bubblewrap")
    assert not (tmp_path / "o").exists()


def test_eval_takes_the_harness_sandbox_options_once() -> None:
    import warnings

    from kimik3.cli.eval import run_command

    names = [p.name for p in run_command.params]
    assert len(names) == len(set(names)), names
    assert {"sandbox", "network", "allow_read", "allow_write", "tool_set", "no_agents_md"} <= set(names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # click: "The parameter --sandbox is used more than once"
        code, text = invoke("run", "--help")
    assert code == 0 and text.count("--sandbox [auto|bwrap|landlock|none]") == 1
    assert "--network" in text and "--allow-read PATH" in text and "--allow-write PATH" in text


@pytest.mark.parametrize("mode", MODES)
def test_the_sandbox_options_reach_every_check_and_are_recorded(tmp_path: Path, host_dir: Path, mode: str) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "t", "Hi", f"echo from-the-check > {host_dir}/written.txt")  # outside the workspace
    script = tmp_path / "s.json"
    script.write_text('["Hello"]')
    out = tmp_path / "out"
    code, text = invoke(str(suite), "--out", str(out), "--script", str(script), "--plain", "--sandbox", mode)
    (r,), _ = read_results(out / "results.jsonl")
    meta = json.loads((out / "eval.json").read_text())
    if mode == "none":  # the point: unsandboxed, the check writes where it likes
        assert code == 0 and text.splitlines()[:2] == [NONE_LINE, f"[1/1] t #1 passed · 1 turn, {r.seconds:.1f} s"]
        assert (host_dir / "written.txt").read_text() == "from-the-check\n"
        assert (meta["sandbox"], meta["sandbox_policy"]) == (NONE_LINE, {"mode": "none"})
        return
    assert code == 0 and text.splitlines()[0] == BWRAP_LINE
    assert (r.passed, r.check_exit) == (False, 1) and "Read-only file system" in r.check_output
    assert list(host_dir.iterdir()) == []
    assert meta["sandbox_policy"] == {"mode": "bwrap", "network": False, "read": [], "write": []}
    # allowed: --allow-write (and --network) reach the check; another policy needs another --out
    code, text = invoke(str(suite), "--out", str(out), "--script", str(script), "--plain", "--allow-write",
                        str(host_dir), "--network")
    assert code == 1 and "holds results of another run (sandbox_policy: {'mode': 'bwrap', 'network': False" in text
    code, text = invoke(str(suite), "--out", str(tmp_path / "out2"), "--script", str(script), "--plain",
                        "--allow-write", str(host_dir), "--network")
    assert code == 0 and text.splitlines()[0] == ("sandbox: bwrap (workspace read-write, the rest read-only, "
                                                  "secrets hidden, /tmp private, 1 more writable, network on)")
    (r,), _ = read_results(tmp_path / "out2" / "results.jsonl")
    assert r.passed and (host_dir / "written.txt").read_text() == "from-the-check\n"
    assert json.loads((tmp_path / "out2" / "eval.json").read_text())["sandbox_policy"] == {
        "mode": "bwrap", "network": True, "read": [], "write": [str(host_dir)]}


def test_eval_help_lists_its_subcommands() -> None:
    code, text = invoke("--help")
    assert code == 0 and "compare" in text and "replay" in text and "run" in text


@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_keeps_every_written_line_and_leaves_no_process(tmp_path: Path, mode: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    suite = tmp_path / "suite"
    shared = tmp_path / "shared"  # where the check tells the test it runs (allowed to write)
    shared.mkdir()
    mark = marker()
    write_task(suite, "a", "A.", "true")
    write_task(suite, "b", "B.", f"sleep {mark} & (setsid sleep {mark} &); echo x > {shared}/started; wait")
    script = tmp_path / "s.json"
    script.write_text('["done a", "done b"]')
    out = tmp_path / "out"
    env = {**os.environ, **{k: "" for k in _CLEAN}, "KIMIK3_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "kimik3", "eval", str(suite), "--out", str(out), "--script",
                             str(script), "--plain", "--sandbox", mode, "--allow-write", str(shared)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (shared / "started").exists() or len(alive_with(mark)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # b's check is running
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert stdout.splitlines()[1:] == ["[1/2] a #1 passed · 1 turn, " + stdout.split("1 turn, ")[1].splitlines()[0]]
    assert stderr.strip().endswith("interrupted")
    results, _ = read_results(out / "results.jsonl")
    assert [r.task for r in results] == ["a"]
    assert json.loads((out / "summary.json").read_text())["attempts"] == 1
    assert alive_with(mark) == []  # the check's processes, the setsid one too, ended with the eval


def test_on_a_terminal_a_progress_bar_runs_above_the_attempt_lines(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import kimik3.cli.eval as cli_eval

    screen = io.StringIO()
    monkeypatch.setattr(cli_eval, "Console", lambda **kw: Console(file=screen, force_terminal=True, width=100, **kw))
    suite = tmp_path / "suite"
    write_task(suite, "t", "Hi", answer_has("Hello"))
    script = tmp_path / "s.json"
    script.write_text('["Hello"]')
    code, text = invoke(str(suite), "--out", str(tmp_path / "out"), "--script", str(script))
    assert code == 0, text
    shown = screen.getvalue()
    assert "[1/1] t #1 passed · 1 turn, " in shown and "attempts" in shown  # the line, and the bar's label
    assert text.splitlines()[0].startswith("sandbox: ")  # which sandbox, then the summary
    assert text.splitlines()[1] == "pass rate: 100.0% (1/1 attempt, 1 task; pass@1 100.0%)"


def test_eval_against_an_endpoint_records_its_served_model(tmp_path: Path) -> None:
    """``--base-url`` without ``--model``: eval.json, the summary and report.md name the model
    /v1/models lists (the stand-in server serves "fake-k3"), not "" / "model unknown"."""
    from tests.verify.fake_server import fake_server

    suite = tmp_path / "suite"
    write_task(suite, "greet", "Hi", answer_has("hi"))
    out = tmp_path / "out"
    with fake_server() as url:
        code, text = invoke(str(suite), "--out", str(out), "--base-url", url, "--plain", "--sandbox", "none")
    assert code == 0, text
    assert "[1/1] greet #1 passed · 1 turn, " in text
    assert json.loads((out / "eval.json").read_text())["model"] == "fake-k3"
    assert json.loads((out / "summary.json").read_text())["model"] == "fake-k3"
    report = (out / "report.md").read_text()
    assert "model fake-k3 · tools " in report and "model unknown" not in report
    # one of each: singular
    assert "pass rate: 100.0% (1/1 attempt, 1 task; pass@1 100.0%)" in text.splitlines()
    assert " · 1 task · 1 attempt" in report


def test_terminal_escapes_from_a_suite_never_reach_the_error_lines(tmp_path: Path) -> None:
    # issue 40: a suite's text (a field name in task.toml; a variant: a task folder's name, listed
    # when --tasks matches none) printed raw could set the clipboard (OSC 52) or recolour the terminal
    script = tmp_path / "s.json"
    script.write_text('["x"]')
    suite = tmp_path / "suite"
    (suite / "t").mkdir(parents=True)
    (suite / "t" / "task.toml").write_text('instruction = "x"\ncheck = "true"\n"\\u001b]52;c;aGk=\\u0007k" = 1\n')
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script))
    assert code == 2 and "t/task.toml: unknown field k (known: budgets," in text and "\x1b" not in text
    other = tmp_path / "other"
    write_task(other, "ok\x1b[2J\x1b]0;owned\x07", "x", "true")
    code, text = invoke(str(other), "--out", str(tmp_path / "o"), "--script", str(script), "--tasks", "zz")
    assert code == 2 and "(tasks: ok)" in text and "\x1b" not in text and "\x07" not in text


def test_a_suite_name_cannot_draw_a_line_of_evals_own(tmp_path: Path) -> None:
    # a variant of issue 40's escapes (a40c): a task folder named with a newline drew a line of
    # its own under eval's (a forged pass rate; an error line); the name stays on its line
    script = tmp_path / "s.json"
    script.write_text('["x"]')
    suite = tmp_path / "suite"
    write_task(suite, "t\npass rate: 100.0%", "x", "false")
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--plain")
    assert code == 0, text
    assert [line.split(" · ")[0] for line in text.splitlines() if line.startswith("[")] == [
        "[1/1] t\\u000apass rate: 100.0% #1 FAILED (completed)"]
    (suite / "t\npass rate: 100.0%" / "task.toml").unlink()
    code, text = invoke(str(suite), "--out", str(tmp_path / "o"), "--script", str(script), "--plain")
    assert code == 2 and "suite/t\\u000apass rate: 100.0% is a task folder without a task.toml" in text


@pytest.mark.parametrize("mode", MODES)
def test_no_credential_reaches_setup_the_agent_or_the_check(tmp_path: Path, mode: str) -> None:
    # issue 40 point 3: a hostile setup and check (and the model's bash) print their whole
    # environment into the results; kimik3's key variables and one the user names (--deny-env)
    # are nowhere in what eval writes or prints
    secrets = {"KIMIK3_API_KEY": "k3-S3CRET", "MOONSHOT_API_KEY": "ms-S3CRET", "OPENAI_API_KEY": "oa-S3CRET",
               "MYCORP_LICENCE": "lic-S3CRET"}
    suite = tmp_path / "suite"
    write_task(suite, "t", "Hi", "cat setup-env.txt; env; exit 1", setup="env > setup-env.txt")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([calls(("bash", {"command": "env"})), "Hello"]))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["eval", str(suite), "--out", str(out), "--script", str(script), "--plain",
                                  "--sandbox", mode, "--deny-env", "MYCORP_LICENCE"],
                           env={**_CLEAN, **secrets, "PLAIN_SETTING": "p-VISIBLE"})
    assert r.exit_code == 0, r.output
    (result,), _ = read_results(out / "results.jsonl")
    assert result.check_output.count("PLAIN_SETTING=p-VISIBLE") == 2  # setup's and the check's environment
    written = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    assert any(b"PLAIN_SETTING=p-VISIBLE" in data for data in written if b'"tool"' in data)  # the model's bash
    for value in secrets.values():
        assert value not in r.output and not any(value.encode() in data for data in written), value
    assert json.loads((out / "eval.json").read_text())["sandbox_policy"]["deny_env"] == ["MYCORP_LICENCE"]
