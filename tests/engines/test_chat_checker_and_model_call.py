"""The chat-mode checker (server text is never cut like raw token output), the model call
object, and the misuse errors of the middle layer."""

from __future__ import annotations

from typing import Any

import pytest

from kimik3 import (
    ChatCompletion,
    Client,
    ContextLengthExceededError,
    EngineRequestError,
    ScriptedEngine,
    ToolDefinitionError,
    ToolError,
    UserError,
    tool,
)
from kimik3.engines import ChatRequest, ModelCall
from kimik3.engines._chat import ChatStreamChecker
from kimik3.formats.k3 import ContentDelta, ReasoningDelta, ToolCallDone
from tests.engines.test_remote_offline import FakeServer, chat_chunk, sse

ANSWER = "ok<|close|>think<|sep|><|open|>response<|sep|>Sunny.<|close|>response<|sep|><|close|>message<|sep|>"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize("tail", ["<", "<|", "<|op", "<|close|", " <|sep"])
def test_server_text_keeps_a_trailing_partial_marker(tail: str) -> None:
    check = ChatStreamChecker(thinking=True, model="k3")
    events = check.feed(chunk({"reasoning_content": "think " + tail}))
    events += check.feed(chunk({"content": "use a < b and x <"}))
    events += check.feed(chunk({"content": tail}, finish="stop"))
    events += check.finish()
    reasoning = "".join(e.delta for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.delta for e in events if isinstance(e, ContentDelta))
    assert reasoning == "think " + tail
    assert content == "use a < b and x <" + tail
    done = check.completion()
    assert done.message.reasoning_content == "think " + tail
    assert done.message.content == "use a < b and x <" + tail
    assert done.finish_reason == "stop" and done.model == "k3"


def test_server_text_still_recovers_complete_leaked_markers() -> None:
    check = ChatStreamChecker(thinking=False, tools=["read"])
    leaked = ('A<|open|>tools<|sep|><|open|>call tool="read" index="1"<|sep|><|open|>argument key="p" '
              'type="string"<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>')
    events = [e for part in (leaked[:7], leaked[7:]) for e in check.feed(chunk({"content": part}))]
    events += check.finish()
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(d.name, d.arguments) for d in done] == [("read", {"p": "x"})]
    assert check.completion().message.content == "A"


def test_raw_token_output_keeps_a_trailing_partial_marker_too() -> None:
    # markers are single tokens: text that ends in a marker's first characters was written as text
    # (issue 27, input 3); chat mode and raw output agree
    from kimik3.formats.k3 import parse

    assert parse("answer<|clo", thinking=False).content == "answer<|clo"
    assert parse("is 3 < 4? yes <", thinking=False).content == "is 3 < 4? yes <"
    assert parse("all done<|open|>", thinking=False).content == "all done"  # a whole marker: an unfinished tag


async def test_chat_mode_reply_ending_in_lt_is_kept_end_to_end() -> None:
    server = FakeServer(lambda r: sse([chat_chunk({"content": "1 <"}), chat_chunk({"content": "<"}, finish="stop")]))
    out = await Client(server.engine()).chat([{"role": "user", "content": "x"}], reasoning_effort="none")
    assert out.message.content == "1 <<"


async def test_model_call_holds_its_completion_once_consumed() -> None:
    engine = ScriptedEngine([ANSWER, ANSWER])
    call = engine.stream(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    assert isinstance(call, ModelCall)
    with pytest.raises(UserError, match="not finished"):
        call.completion  # noqa: B018
    async with call:
        deltas = [e async for e in call]
    assert "".join(e.delta for e in deltas if isinstance(e, ContentDelta)) == "Sunny."
    assert isinstance(call.completion, ChatCompletion) and call.completion.message.content == "Sunny."
    with pytest.raises(UserError, match="already consumed"):  # a finished call is not silently empty
        [e async for e in call]
    got = await engine.stream(ChatRequest(messages=[{"role": "user", "content": "y"}])).get()
    assert got.message.reasoning_content == "ok"


async def test_leaving_a_model_call_early_closes_the_engine_stream() -> None:
    closed: list[bool] = []

    class Tracking(ScriptedEngine):
        async def generate(self, prompt_ids: Any, request: Any, *, images: Any = ()) -> Any:
            try:
                async for c in super().generate(prompt_ids, request, images=images):
                    yield c
            finally:
                closed.append(True)

    engine = Tracking([ANSWER], chunk_size=1)
    async with Client(engine).stream([{"role": "user", "content": "x"}]) as call:
        async for _ in call:
            break
        assert closed == []  # still open inside the block
    assert closed == [True]  # leaving the block closed the generator, at once
    with pytest.raises(UserError):
        call.completion  # noqa: B018


def test_misuse_is_a_user_error_that_old_except_clauses_still_catch() -> None:
    with pytest.raises(UserError) as e1:
        Client(ScriptedEngine([])).stream([{"role": "user", "content": "x"}], temprature=0.5)  # type: ignore[call-arg]
    assert isinstance(e1.value, TypeError) and isinstance(e1.value, ValueError)
    with pytest.raises(UserError, match="chunk_size"):
        ScriptedEngine([], chunk_size=0)
    from kimik3 import VLLMEngine

    with pytest.raises(UserError, match="unknown preset 'k3-nope'"):
        VLLMEngine("/nowhere", preset="k3-nope")


def test_tool_definition_error_is_misuse_not_a_run_time_tool_error() -> None:
    def bad(*args: int) -> int:
        """Varargs cannot be a tool."""
        return 0

    with pytest.raises(ToolDefinitionError) as e:
        tool(bad)
    assert isinstance(e.value, UserError) and not isinstance(e.value, ToolError)


def test_in_process_context_length_error_has_no_http_status() -> None:
    err = ContextLengthExceededError("prompt too long", status_code=None)
    assert isinstance(err, EngineRequestError) and err.status_code is None and err.response is None
