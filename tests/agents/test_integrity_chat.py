"""Chat mode (issue 14, 3): tool calls the chat checker cannot use are answered with a tool error
(arguments that are not a JSON object, i13's failed calls) or named in a note (a call cut by
``finish_reason: length``), so the model retries; such a run is never a clean "completed" (it is
``degraded``). Against an in-process OpenAI server (httpx)."""

from __future__ import annotations

from typing import Any

from kimik3 import Agent, ToolMessage, UserMessage, tool
from tests.engines.test_remote_offline import chat_chunk, replies

RAN: list[str] = []


@tool
def exec(command: str) -> str:
    """Run a command."""
    RAN.append(command)
    return f"ran {command}"


def tool_call(index: int, call_id: str, arguments: str) -> dict[str, Any]:
    return chat_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": "exec", "arguments": arguments}}]})


ANSWER = [chat_chunk({"reasoning_content": "ok"}), chat_chunk({"content": "Done."}, finish="stop")]
FAILED = (
    "Error: the call was not run: arguments are not valid JSON (Expecting property name enclosed in double "
    'quotes: line 1 column 31 (char 30)). The arguments you sent: {"command": "ls", "bg": true, note": "x"}. '
    "Call the tool again with its arguments as one JSON object."
)


async def test_an_undecodable_call_beside_a_good_one_is_answered_with_a_tool_error() -> None:
    RAN.clear()
    turn1 = [chat_chunk({"reasoning_content": "two calls"}), tool_call(0, "c1", '{"command": "ls"}'),
             tool_call(1, "c2", '{"command": "ls", "bg": true, note": "x"}'), chat_chunk({}, finish="tool_calls")]
    turn2 = [tool_call(0, "c3", '{"command": "ls -a"}'), chat_chunk({}, finish="tool_calls")]
    server = replies(turn1, turn2, ANSWER)
    result = await Agent(tools=[exec], engine=server.engine()).run("list")
    assert RAN == ["ls", "ls -a"] and result.output == "Done." and result.stop_reason == "completed"
    second = server.requests[1]["body"]["messages"]
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in second[-2:]] == [
        ("tool", "c1", "ran ls"), ("tool", "c2", FAILED)]
    assert (result.dropped_calls, result.failed_calls, result.degraded) == (1, 1, True)
    assert result.issues == [
        "turn 1: the call to 'exec' could not be run (arguments are not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 31 (char 30))) and did not run"]


async def test_only_undecodable_calls_never_end_completed_with_an_empty_answer() -> None:
    RAN.clear()
    bad = [chat_chunk({"reasoning_content": "one call"}), tool_call(0, "c1", '{"command": '),
           chat_chunk({}, finish="tool_calls")]
    server = replies(bad, ANSWER)
    result = await Agent(tools=[exec], engine=server.engine()).run("list")
    assert RAN == [] and result.output == "Done." and result.degraded and result.dropped_calls == 1
    (error,) = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert error == ("Error: the call was not run: arguments are not valid JSON (Expecting value: line 1 column 13 "
                     '(char 12)). The arguments you sent: {"command": . Call the tool again with its arguments as '
                     "one JSON object.")


async def test_a_chat_call_cut_by_length_is_named_as_cut() -> None:
    RAN.clear()
    cut = [tool_call(0, "c1", '{"command": "ls"}'), tool_call(1, "c2", '{"command": "find / -na'),
           chat_chunk({}, finish="length")]
    server = replies(cut, ANSWER)
    result = await Agent(tools=[exec], engine=server.engine()).run("list")
    assert RAN == ["ls"] and result.output == "Done." and result.cut_calls == 1
    notes = [m.content for m in result.messages if isinstance(m, UserMessage)][1:]
    assert notes == ["Some of your tool calls did not run:\n- The call to 'exec' was cut by the output limit "
                     "(max_tokens) before it finished and did not run. Make the call again; if its arguments "
                     "are long, split the work into smaller calls."]
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["ran ls"]
