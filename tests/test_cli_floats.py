"""Every float option of the `kimik3` command refuses ``nan``, ``inf`` and ``-inf`` as a usage
error (exit 2, one ``Error:`` line, no traceback): click's FloatRange lets NaN through every
bound and inf through an open one (``kimik3 run --max-usd nan`` ended in a traceback from
Budgets). The options are found by walking the command tree, so a new one is covered."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from kimik3.cli import main
from kimik3.cli.engine import FiniteFloat


def _commands(group: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            yield from _commands(command, (*path, name))


def _float_options() -> list[tuple[tuple[str, ...], str]]:
    found = []
    for path, command in _commands(main):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, click.types.FloatParamType):
                found.append((path, param.opts[0]))
    return found


FLOAT_OPTIONS = _float_options()


def test_the_float_options_found_are_all_finite_floats() -> None:
    """The walk finds the options (so the test below cannot pass on nothing), and each is a FiniteFloat."""
    names = {(" ".join(p), o) for p, o in FLOAT_OPTIONS}
    assert {("run", "--max-usd"), ("run", "--temperature"), ("run", "--top-p"), ("run", "--mcp-timeout"),
            ("resume", "--max-usd"), ("chat", "--gpu-memory-utilization"), ("verify", "--timeout"),
            ("eval run", "--temperature"), ("eval compare", "--max-drop")} <= names
    for path, command in _commands(main):
        for param in command.params:
            if isinstance(param.type, click.types.FloatParamType):
                assert isinstance(param.type, FiniteFloat), (path, param.name)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity"])
@pytest.mark.parametrize(("path", "option"), FLOAT_OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o in FLOAT_OPTIONS])
def test_a_float_option_refuses_a_non_finite_value(path: tuple[str, ...], option: str, value: str) -> None:
    out = CliRunner().invoke(main, [*path, option, value])
    assert out.exit_code == 2, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert "Traceback" not in out.output
    errors = [line for line in out.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"'{option}'" in errors[0], out.output
    assert ("is not a finite number" in errors[0]) or ("not in the range" in errors[0]), out.output


@pytest.mark.parametrize("value", ["nan,0.3,15", "3,inf,15", "3,0.3,-inf", "3,0.3,1e400"])
@pytest.mark.parametrize("command", ["run", "resume"])
def test_price_refuses_a_non_finite_price(command: str, value: str) -> None:
    out = CliRunner().invoke(main, [command, "--price", value])
    assert out.exit_code == 2, out.output
    assert ("Error: Invalid value for '--price': expected INPUT,CACHED,OUTPUT[,CACHE_WRITE[,CACHE_WRITE_1H]] in USD "
            f"per 1M tokens (e.g. 3,0.3,15 or 2,0.2,10,2,4), got '{value}'") in out.output


def test_a_finite_value_is_still_read() -> None:
    assert FiniteFloat(min=0, min_open=True).convert("0.25", None, None) == 0.25
    with pytest.raises(click.BadParameter, match="'nan' is not a finite number"):
        FiniteFloat(min=0).convert("nan", None, None)
    with pytest.raises(click.BadParameter, match="is not a finite number"):
        FiniteFloat().convert(float("inf"), None, None)
