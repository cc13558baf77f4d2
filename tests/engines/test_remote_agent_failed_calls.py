"""An Agent over a chat-mode endpoint that passes a model's malformed tool-call arguments through:
the call is kept, never run, and answered with a tool error the model can act on (issue 13, 6)."""

from __future__ import annotations

from kimik3 import Agent, AssistantMessage, RemoteEngine, ToolMessage, tool
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import d

RAN: list[str] = []


@tool
def exec(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    RAN.append(command)
    return f"ran {command}"


async def test_failed_call_is_answered_with_a_tool_error_and_the_good_one_runs() -> None:
    RAN.clear()
    turn1 = [
        d({"reasoning_content": "two calls"}),
        d({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "exec", "arguments": '{"command": "ls"}'}}]}),
        d({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "exec", "arguments": '{"command": "ls", "bg": true, note": "x"}'}}]}),
        d({}, "tool_calls"),
    ]
    turn2 = [d({"reasoning_content": "ok"}), d({"content": "Done."}, "stop")]
    async with SSEServer([Reply(parts=sse(turn1)), Reply(parts=sse(turn2))]) as server:
        result = await Agent(tools=[exec], engine=RemoteEngine(base_url=server.base_url, model="k3")).run("list")
        replayed = server.requests[1]["body"]["messages"]
    assert RAN == ["ls"] and result.output == "Done."
    assistant = next(m for m in result.messages if isinstance(m, AssistantMessage) and m.tool_calls)
    assert [(c.id, c.function.arguments) for c in assistant.tool_calls or ()] == [
        ("c1", '{"command": "ls"}'),
        ("c2", "{}"),  # never invalid JSON in the history
    ]
    results = {m.tool_call_id: m.content for m in result.messages if isinstance(m, ToolMessage)}
    assert results["c1"] == "ran ls"
    assert results["c2"] == (
        "Error: the call was not run: arguments are not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 31 (char 30)). The arguments you sent: "
        '{"command": "ls", "bg": true, note": "x"}. Call the tool again with its arguments as one JSON object.'
    )
    # what went back to the server: both calls, each result under its own call id
    assert [c["function"]["arguments"] for c in replayed[1]["tool_calls"]] == ['{"command": "ls"}', "{}"]
    assert [(m["tool_call_id"], m["content"][:12]) for m in replayed[2:4]] == [("c1", "ran ls"), ("c2", "Error: the c")]
