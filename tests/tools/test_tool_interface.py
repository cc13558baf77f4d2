"""``Tool`` is an interface (issue 29, item 3): a function tool, an MCP tool and the harness's
guarded tools each implement it with their own constructor; nothing copies another tool's state."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, ScriptedEngine, ToolArgumentsError
from kimik3.harness import ReadTracker
from kimik3.tools import FunctionTool, Tool, ToolContext, ToolResult, tool
from kimik3.tools._tool import load_arguments

from ..harness.helpers import answer, calls


class Write(Tool):
    """A tool that is no Python function (as an MCP server's or a remote service's is)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = "write_file"
        self.description = "Write a file."
        self.parameters = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                           "required": ["path", "content"]}
        self.ran: list[dict[str, Any]] = []

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        args = dict(load_arguments(arguments))
        if not isinstance(args.get("path"), str) or not isinstance(args.get("content"), str):
            raise ToolArgumentsError("path and content must be strings")
        return args

    async def run(self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None, *,
                  timeout: float | None = None) -> ToolResult:
        try:
            args = self.validate(arguments)
        except ToolArgumentsError as e:
            return ToolResult.from_exception(e)
        self.ran.append(args)
        (self.root / args["path"]).write_text(args["content"])
        return ToolResult(content=f"wrote {args['path']}")


def test_the_interface_needs_validate_and_run() -> None:
    class Half(Tool):
        async def run(self, arguments: Any, context: Any = None, *, timeout: float | None = None) -> ToolResult:
            return ToolResult(content="")

    with pytest.raises(TypeError, match=r"abstract.*validate"):
        Half()  # type: ignore[abstract]


def test_tool_of_a_function_is_still_a_function_tool() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    built = Tool(add)  # type: ignore[abstract]  # the former meaning of the name
    assert type(built) is FunctionTool and isinstance(built, Tool)
    assert built.parameters == tool(add).parameters and built(2, 3) == 5
    assert repr(built) == "FunctionTool(name='add', parameters=['a', 'b'])"
    assert type(Tool.from_function(add)) is FunctionTool


async def test_an_agent_calls_any_implementation_through_the_interface(tmp_path: Path) -> None:
    write = Write(tmp_path)
    assert write.spec.function.name == "write_file" and write.spec.function.parameters == write.parameters
    engine = ScriptedEngine([calls(("write_file", {"path": "n.txt", "content": "hi"})), answer("done")])
    result = await Agent(tools=[write], engine=engine).run("go")
    assert result.output == "done" and (tmp_path / "n.txt").read_text() == "hi"
    assert write.ran == [{"path": "n.txt", "content": "hi"}]
    assert '"name":"write_file"' in engine.calls[0].prompt  # declared from its own attributes


async def test_the_read_guard_wraps_a_tool_that_is_not_a_function(tmp_path: Path) -> None:
    # The guard once copied a function tool's __dict__ and used its validation: on any other tool
    # that validation raised, and the guard stepped aside while the write went ahead.
    (tmp_path / "old.txt").write_text("keep")
    write = Write(tmp_path)
    (guarded,) = ReadTracker(tmp_path).wrap([write])
    assert guarded is not write and isinstance(guarded, Tool)
    assert (guarded.name, guarded.description, guarded.parameters, guarded.spec) == (
        write.name, write.description, write.parameters, write.spec)
    refused = await guarded.run({"path": "old.txt", "content": "lost"})
    assert refused.is_error and refused.text == (
        "Error: old.txt has not been read in this run; read it with read_file first, then make the change "
        "(nothing was written)")
    assert (tmp_path / "old.txt").read_text() == "keep" and write.ran == []
    created = await guarded.run({"path": "new.txt", "content": "fresh"})  # a new file needs no read
    assert created.text == "wrote new.txt" and (tmp_path / "new.txt").read_text() == "fresh"
    bad = await guarded.run({"path": 5})
    assert bad.is_error and bad.text == "Error: ToolArgumentsError: path and content must be strings"
