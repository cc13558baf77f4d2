"""Argument validation kinds from the corpus re-run (issue 40): ``"nan"`` / ``"inf"`` never reach a
number parameter as non-finite floats (B34), and a path or a command holding U+FFFD, the replacement
character for bytes that could not be decoded, is a failed call the model reads, never run (N46).
Through an Agent too: the file is never created, the command never runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from kimik3 import Agent, ScriptedEngine, ToolArgumentsError, ToolMessage, tool
from tests.agents.test_agent import answer, calls

FINITE = "Input should be a finite number"


@tool
def scale(factor: float, bounds: list[float] | None = None, weights: dict[str, float] | None = None,
          big: Annotated[float, Field(allow_inf_nan=True)] = 0.0) -> str:
    """Scale something.

    Args:
        factor: the factor.
        bounds: lower and upper bound.
        weights: a weight per name.
        big: a number that may be infinite (the parameter says so).
    """
    return f"{factor}"


NON_FINITE = [
    ({"factor": "nan"}, f"factor: {FINITE} (got 'nan')"),  # B34 as reported
    ({"factor": "inf"}, f"factor: {FINITE} (got 'inf')"),
    ({"factor": "-Infinity"}, f"factor: {FINITE} (got '-Infinity')"),
    ({"factor": "NaN"}, f"factor: {FINITE} (got 'NaN')"),
    ({"factor": math.inf}, f"factor: {FINITE} (got inf)"),  # a Python caller's float
    ({"factor": 1, "bounds": [0, "inf"]}, f"bounds.1: {FINITE} (got 'inf')"),  # inside a list
    ({"factor": 1, "weights": {"a": "nan"}}, f"weights.a: {FINITE} (got 'nan')"),  # inside a map
]


@pytest.mark.parametrize(("arguments", "error"), NON_FINITE)
def test_non_finite_numbers_are_refused(arguments: dict[str, Any], error: str) -> None:
    with pytest.raises(ToolArgumentsError) as e:
        scale.validate(arguments)
    assert str(e.value) == error


def test_a_parameter_that_allows_non_finite_numbers_gets_them() -> None:
    got = scale.validate({"factor": "1e3", "big": "inf"})
    assert (got["factor"], got["big"]) == (1000.0, math.inf)


def test_non_finite_json_text_is_refused_before_validation() -> None:
    with pytest.raises(ToolArgumentsError, match="beyond the JSON limits"):
        scale.validate('{"factor": NaN}')


class Box(BaseModel):
    side: float


@tool
def box(b: Box) -> str:
    """A box."""
    return "ok"


@dataclass
class Span:
    width: float


class Shelf(BaseModel):
    boxes: list[Box]


@tool
def nested(b: Box | None = None, s: Span | None = None, shelf: Shelf | None = None,
           pairs: list[tuple[float, float]] | None = None, u: float | str = 0.0) -> str:
    """Nested floats."""
    return "ok"


NESTED = [  # the refusal is a pass over the validated arguments: every nested float (issue 41 attack round)
    (box, {"b": {"side": "nan"}}, "b.side: {} (got nan)"),  # a user's BaseModel (pydantic's default allows NaN)
    (box, {"b": '{"side": "inf"}'}, "b.side: {} (got inf)"),  # the model sent as JSON text
    (nested, {"shelf": {"boxes": [{"side": 1}, {"side": "Infinity"}]}}, "shelf.boxes.1.side: {} (got inf)"),  # deeper
    (nested, {"s": {"width": "-inf"}}, "s.width: {} (got '-inf')"),  # a dataclass (the tool's config reaches it)
    (nested, {"pairs": [[1, 2], [3, "nan"]]}, "pairs.1.1: {} (got 'nan')"),  # tuples in a list
]


@pytest.mark.parametrize(("fn", "arguments", "where"), NESTED)
def test_a_non_finite_float_inside_any_parameter_is_refused(fn: Any, arguments: dict[str, Any], where: str) -> None:
    with pytest.raises(ToolArgumentsError) as e:
        fn.validate(arguments)
    assert str(e.value) == where.format(FINITE)


def test_text_that_reads_nan_is_kept_where_a_string_is_allowed() -> None:
    assert nested.validate({"u": "nan", "b": {"side": 2}})["u"] == "nan"


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return "written"


@tool
def bash(command: str, paths: list[str] | None = None) -> str:
    """Run a command."""
    return "ran"


@tool
def edit(edits: list[dict[str, Any]] | None = None, patch: str = "") -> str:
    """Edit files."""
    return "edited"


FFFD = [
    (write_file, {"path": "src/\ufffd\ufffd.py", "content": "x"}, "path"),  # N46 as reported
    (write_file, {"path": "\ufffd", "content": ""}, "path"),
    (bash, {"command": "rm -f 'caf\ufffd.txt'"}, "command"),
    (bash, {"command": "ls", "paths": ["a", "b\ufffd"]}, "paths"),
    (edit, {"edits": [{"path": "a\ufffd", "old": "x", "new": "y"}]}, "edits.0.path"),  # nested (attack round)
    (edit, {"edits": [{"path": "ok.py"}, {"cmd": ["ls", "b\ufffd"]}]}, "edits.1.cmd"),
    (edit, {"patch": "*** Begin Patch\n*** Update File: a\ufffd.py\n@@\n-a\n+b\n*** End Patch"}, "patch"),
    (edit, {"patch": "--- a/caf\ufffd.py\n+++ b/caf\ufffd.py\n@@ -1 +1 @@\n-a\n+b\n"}, "patch"),
]
WHY = ("it holds U+FFFD (\ufffd), the replacement character for bytes that could not be decoded: the real characters "
       "were lost on the way; write the path or command again with its real characters")


@pytest.mark.parametrize(("fn", "arguments", "param"), FFFD)
def test_a_replacement_character_in_a_path_or_command_is_refused(fn: Any, arguments: dict[str, Any],
                                                                 param: str) -> None:
    with pytest.raises(ToolArgumentsError) as e:
        fn.validate(arguments)
    assert str(e.value) == f"{param}: {WHY}"


def test_a_replacement_character_elsewhere_is_text() -> None:
    assert write_file.validate({"path": "notes.txt", "content": "bad bytes look like \ufffd"})["content"].endswith(
        "\ufffd")
    # a patch's body lines are file text, only its file-header lines name files
    assert edit.validate({"patch": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\ufffd\n"})["patch"].endswith("\ufffd\n")


async def test_an_agent_never_runs_the_call_and_the_model_reads_why(tmp_path: Path) -> None:
    made: list[str] = []

    @tool
    def write_file(path: str, content: str) -> str:  # the agent's own, writing under tmp_path
        """Write a file."""
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
        made.append(path)
        return "written"

    engine = ScriptedEngine([
        calls(("write_file", {"path": "src/\ufffd\ufffd.py", "content": "print(1)"}),
              ("scale", {"factor": "nan"})),
        answer("gave up"),
    ])  # fmt: skip
    result = await Agent(engine=engine, tools=[write_file, scale]).run("write it")
    assert made == [] and list(tmp_path.iterdir()) == []
    errors = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert errors == [f"Error: ToolArgumentsError: path: {WHY}",
                      f"Error: ToolArgumentsError: factor: {FINITE} (got 'nan')"]
    assert result.degraded and result.output == "gave up"


@pytest.mark.parametrize(("name", "arguments"), [
    ("write_file", {"path": "src/\ufffd\ufffd.py", "content": "print(1)"}),  # N46 as reported
    ("edit_file", {"path": "caf\ufffd.txt", "old_string": "a", "new_string": "b"}),
    ("read_file", {"path": "\ufffd"}),
    ("bash", {"command": "touch 'x\ufffd' && echo made"}),
])  # fmt: skip
async def test_the_coding_tools_refuse_it_and_touch_nothing(tmp_path: Path, name: str,
                                                            arguments: dict[str, Any]) -> None:
    from kimik3.tools.coding import coding_tools

    (tmp_path / "keep.txt").write_text("a")
    (fn,) = [t for t in coding_tools(tmp_path) if t.name == name]
    result = await fn.run(arguments)
    param = "command" if name == "bash" else "path"
    assert (result.is_error, result.content) == (True, f"Error: ToolArgumentsError: {param}: {WHY}")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep.txt"]


@pytest.mark.parametrize(("name", "arguments", "pattern"), [
    ("glob", {"pattern": "src/caf\ufffd*.py"}, "src/caf\ufffd*.py"),
    ("grep", {"pattern": "def", "glob": "*\ufffd.py"}, "*\ufffd.py"),
])  # fmt: skip
async def test_a_glob_holding_it_is_refused_never_no_matches(tmp_path: Path, name: str, arguments: dict[str, Any],
                                                             pattern: str) -> None:
    # a variant of N46 (a40c): a path pattern whose real characters were lost answered "no
    # matches", so the model read that the file it meant did not exist
    from kimik3.tools.coding import coding_tools

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "café.py").write_text("def f(): pass\n")
    (fn,) = [t for t in coding_tools(tmp_path) if t.name == name]
    result = await fn.run(arguments)
    assert (result.is_error, result.content) == (True, (
        f"Error: ToolError: pattern {pattern!r} holds U+FFFD, the replacement character for bytes that could not be "
        "decoded: the real characters were lost on the way; write it again with its real characters"))


@tool
def phase(z: complex, v: float = 0.0) -> str:
    """A complex number."""
    return "ok"


@pytest.mark.parametrize(("arguments", "error"), [
    ({"z": "nan+infj"}, "z: Input should be a finite number (got (nan+infj))"),  # a complex's parts
    ({"z": "1+infj"}, "z: Input should be a finite number (got (1+infj))"),
    ({"z": 1, "v": "1e999"}, f"v: {FINITE} (got '1e999')"),  # a number beyond the float range
    ({"z": 1, "v": "-1e400"}, f"v: {FINITE} (got '-1e400')"),
    ({"z": 1, "v": " +inf "}, f"v: {FINITE} (got ' +inf ')"),
])  # fmt: skip
def test_a_non_finite_complex_or_an_out_of_range_number_is_refused(arguments: dict[str, Any], error: str) -> None:
    # variants of B34 (a40c): a complex parameter took 'nan+infj' as a non-finite value
    with pytest.raises(ToolArgumentsError) as e:
        phase.validate(arguments)
    assert str(e.value) == error
    assert phase.validate({"z": "1+2j"})["z"] == 1 + 2j
