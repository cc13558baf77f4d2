"""Text that is not valid Unicode (lone surrogates: a file name read with ``surrogateescape``) in
a task, a message or a tool result: escaped visibly when the message is built (kimik3.types), so
the token engines and chat mode (RemoteEngine) both send it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from kimik3 import Agent, RemoteEngine, ScriptedEngine, tool
from kimik3.formats.k3 import render_output
from kimik3.types import AssistantMessage, SystemMessage, TextPart, ToolMessage, UserMessage, to_message

NAME = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # 'caf\udce9.txt'


def test_messages_escape_lone_surrogates_visibly() -> None:
    assert UserMessage(content="open " + NAME).content == "open caf\\xe9.txt"
    assert UserMessage(content=["a\ud800b", TextPart(text=NAME)]).content == [
        TextPart(text="a\\ud800b"),
        TextPart(text="caf\\xe9.txt"),
    ]
    assert SystemMessage(content="\udfff").content == "\\udfff"
    assert ToolMessage(content=NAME, tool_call_id="c").content == "caf\\xe9.txt"
    assert AssistantMessage(content="x", reasoning_content=NAME).reasoning_content == "caf\\xe9.txt"
    assert to_message({"role": "user", "content": [{"type": "text", "text": NAME}]}).content == [
        TextPart(text="caf\\xe9.txt")
    ]
    assert UserMessage(content="日本語 é 😀").content == "日本語 é 😀"  # valid text untouched


@tool
def listdir() -> str:
    """Lists a directory holding a file name that is not UTF-8."""
    return "files: " + NAME


async def test_the_token_engine_path_runs_with_a_surrogate_task_and_tool_result() -> None:
    reply = render_output({"reasoning_content": "r", "content": "",
                           "tool_calls": [{"id": "c1", "function": {"name": "listdir", "arguments": {}}}]})  # fmt: skip
    engine = ScriptedEngine([reply, render_output({"reasoning_content": "r", "content": "ok"})])
    result = await Agent(tools=[listdir], engine=engine).run("summarise " + NAME)
    assert result.stop_reason == "completed" and result.output == "ok"
    assert "summarise caf\\xe9.txt" in engine.calls[0].prompt
    assert "files: caf\\xe9.txt" in engine.calls[1].prompt


async def test_chat_mode_sends_a_surrogate_task_as_valid_json() -> None:
    bodies: list[dict[str, Any]] = []

    def respond(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content.decode("utf-8")))  # strict UTF-8: would fail on a surrogate
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "k3",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}  # fmt: skip
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})

    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(respond)))  # fmt: skip
    result = await Agent(engine=RemoteEngine(model="k3", client=client)).run("summarise " + NAME)
    assert result.output == "ok"
    assert bodies[0]["messages"] == [{"role": "user", "content": "summarise caf\\xe9.txt"}]


RAN: list[Any] = []


@tool
def store(x: Any) -> str:
    """Stores a value."""
    RAN.append(x)
    return "stored"


async def test_raw_mode_a_lone_surrogate_in_an_argument_is_a_failed_call_as_in_chat_mode(tmp_path: Any) -> None:
    # issue 27, item 4: {"x": "\ud800"} inside an object argument raised UnicodeEncodeError out of
    # Agent.run (estimate_tokens, the session writer); chat mode already made it a failed call
    head = 'r<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="store" index="1"<|sep|>'
    tail = "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    for arg in ('<|open|>argument key="x" type="object"<|sep|>{"x": "\\ud800"}',
                '<|open|>argument key="x" type="array"<|sep|>["\\udc80"]',
                '<|open|>argument key="x" type="string"<|sep|>a\ud800b'):
        RAN.clear()
        path = tmp_path / f"s{len(arg)}.jsonl"
        engine = ScriptedEngine([head + arg + tail, render_output({"reasoning_content": "r", "content": "ok"})])
        result = await Agent(tools=[store], engine=engine).run("store it", session=path)
        assert RAN == [] and result.output == "ok" and result.failed_calls == 1
        (error,) = [m.content for m in result.messages if isinstance(m, ToolMessage)]
        assert str(error).startswith("Error: the call was not run: argument 'x': ") and "lone UTF-16 surrogate" in str(error)
        path.read_text(encoding="utf-8")  # the session file was written and is valid UTF-8
