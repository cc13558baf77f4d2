"""The failure texts the model reads come from one module through one replaceable formatter
(issue 29, item 5; openai-agents' ``failure_error_function``)."""

from __future__ import annotations

from typing import Any

import pytest

from kimik3 import Agent, Deny, ScriptedEngine, ToolMessage, UserError, tool
from kimik3.agents import Allow, PendingCall
from kimik3.tools import ToolFailure, default_failure_text
from kimik3.tools._failures import exception, unknown_tool

from ..harness.helpers import answer, calls


@tool
def boom(text: str) -> str:
    """Fails."""
    raise ValueError(f"bad {text}")


@tool
def secret() -> str:
    """Never allowed."""
    return "the secret"


def approve(pending: PendingCall) -> Any:
    return Deny("not this one") if pending.name == "secret" else Allow()


def tool_texts(messages: list[Any]) -> list[Any]:
    return [m.content for m in messages if isinstance(m, ToolMessage)]


async def test_the_default_words_are_error_and_the_message() -> None:
    engine = ScriptedEngine([calls(("boom", {"text": "x"}), ("nope", {}), ("secret", {}), ("boom", {"txt": "x"})),
                             answer("done")])
    result = await Agent(tools=[boom, secret], engine=engine, approval=approve).run("go")
    assert tool_texts(result.messages) == [
        "Error: ValueError: bad x",
        "Error: unknown tool 'nope'; available tools: boom, secret",
        "Error: the user denied this call: not this one",
        "Error: ToolArgumentsError: unexpected argument(s): txt (expected: text)",
    ]


async def test_one_formatter_words_every_failure_of_a_run() -> None:
    seen: list[ToolFailure] = []

    def words(failure: ToolFailure) -> str:
        seen.append(failure)
        return f"[{failure.kind}] {failure.message}"

    engine = ScriptedEngine([calls(("boom", {"text": "x"}), ("nope", {}), ("secret", {})), answer("done")])
    result = await Agent(tools=[boom, secret], engine=engine, approval=approve, failure_text=words).run("go")
    assert tool_texts(result.messages) == [
        "[exception] ValueError: bad x",
        "[unknown_tool] unknown tool 'nope'; available tools: boom, secret",
        "[denied] the user denied this call: not this one",
    ]
    by_kind = {f.kind: f for f in seen}  # the calls ran concurrently: in any order
    assert sorted(by_kind) == ["denied", "exception", "unknown_tool"] and len(seen) == 3
    assert isinstance(by_kind["exception"].error, ValueError) and by_kind["denied"].error is None
    assert result.failed_calls == 3


def test_the_failures_are_data_and_the_default_text_is_error_first() -> None:
    error = TimeoutError()
    assert exception(error) == ToolFailure("exception", "TimeoutError", error)
    assert default_failure_text(unknown_tool("x", [])) == "Error: unknown tool 'x'; available tools: none"
    with pytest.raises(UserError, match=r"Agent\(failure_text=\.\.\.\) must be a callable"):
        Agent(engine=ScriptedEngine([]), failure_text="Error")  # type: ignore[arg-type]
