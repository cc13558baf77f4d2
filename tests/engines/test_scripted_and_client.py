"""ScriptedEngine through the real parser; Client retries and typed errors (offline)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio
import pytest

from kimik3 import (
    APIConnectionError,
    BadRequestError,
    ChatCompletion,
    Client,
    EngineError,
    RateLimitError,
    ScriptedEngine,
    ServiceUnavailableError,
)
from kimik3.engines import ChatRequest, Engine, ModelCall
from kimik3.formats.k3 import ContentDelta, Event, ReasoningDelta, ToolCallDone, ToolCallStarted, render_output

CALL = (
    "need weather<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
    '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
    '<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
)
ANSWER = "ok<|close|>think<|sep|><|open|>response<|sep|>Sunny.<|close|>response<|sep|><|close|>message<|sep|>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
async def test_scripted_engine_streams_through_the_parser(chunk_size: int) -> None:
    engine = ScriptedEngine([CALL], chunk_size=chunk_size)
    async with Client(engine).stream([{"role": "user", "content": "weather?"}], tools=TOOLS) as call:
        events = [e async for e in call]
    reasoning = "".join(e.delta for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == "need weather"
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(s.index, s.name) for s in started] == [(0, "get_weather")]
    assert done[0].arguments == {"city": "Paris", "days": 3} and done[0].id == started[0].id
    completion = call.completion
    assert isinstance(completion, ChatCompletion)
    msg = completion.message
    assert completion.finish_reason == "tool_calls"
    assert msg.reasoning_content == "need weather" and msg.content == ""
    assert msg.tool_calls is not None and msg.tool_calls[0].function.arguments == '{"city": "Paris", "days": 3}'
    # the prompt was really encoded and recorded
    (scripted,) = engine.calls
    assert scripted.prompt.endswith('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>')
    assert '"name":"get_weather"' in scripted.prompt


async def test_scripted_function_and_usage_estimate() -> None:
    seen: list[int] = []

    def script(messages: list[Any]) -> str:
        seen.append(len(messages))
        return ANSWER

    client = Client(ScriptedEngine(script))
    out = await client.chat([{"role": "user", "content": "hi"}])
    assert seen == [1]
    assert out.message.content == "Sunny." and out.finish_reason == "stop"
    assert out.usage.completion_tokens == (len(ANSWER.encode()) + 3) // 4
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens > 0
    assert out.to_openai()["choices"][0]["message"]["reasoning"] == "ok"


async def test_truncated_script_reports_length() -> None:
    cut = CALL[: CALL.index("3<|close|>argument")]
    out = await Client(ScriptedEngine([cut])).chat([{"role": "user", "content": "x"}], tools=TOOLS)
    assert out.truncated and out.finish_reason == "length"
    assert out.message.tool_calls is None and out.dropped_tool_calls == ["get_weather"]


async def test_scripted_engine_runs_out() -> None:
    client = Client(ScriptedEngine([ANSWER]))
    await client.chat([{"role": "user", "content": "1"}])
    with pytest.raises(EngineError, match="ran out of responses after 1"):
        await client.chat([{"role": "user", "content": "2"}])


class FlakyEngine(Engine):
    """Fails with the given errors, then answers."""

    def __init__(self, errors: Sequence[Exception], fail_after_first_event: bool = False) -> None:
        self.errors = list(errors)
        self.attempts = 0
        self.fail_after_first_event = fail_after_first_event

    def stream(self, request: ChatRequest, **k3: Any) -> ModelCall:
        return ModelCall(self._call(request))

    async def _call(self, request: ChatRequest) -> AsyncGenerator[Event | ChatCompletion, None]:
        self.attempts += 1
        if self.errors and not self.fail_after_first_event:
            raise self.errors.pop(0)
        async with ScriptedEngine([ANSWER]).stream(request) as call:
            async for event in call:
                yield event
                if self.errors and self.fail_after_first_event:
                    raise self.errors.pop(0)
        yield call.completion


async def test_client_retries_429_and_5xx_honouring_retry_after() -> None:
    engine = FlakyEngine(
        [
            RateLimitError("429", status_code=429, retry_after=0.0),
            ServiceUnavailableError("503", status_code=503, retry_after=0.0),
        ]
    )
    out = await Client(engine, max_retries=2).chat([{"role": "user", "content": "x"}])
    assert out.message.content == "Sunny." and engine.attempts == 3


async def test_client_gives_up_after_max_retries() -> None:
    engine = FlakyEngine([APIConnectionError("down")] * 3)
    engine.errors = [APIConnectionError("down") for _ in range(3)]
    with pytest.raises(APIConnectionError):
        await Client(engine, max_retries=1).chat([{"role": "user", "content": "x"}])
    assert engine.attempts == 2


async def test_client_does_not_retry_bad_requests_or_started_streams() -> None:
    engine = FlakyEngine([BadRequestError("bad", status_code=400)])
    with pytest.raises(BadRequestError):
        await Client(engine).chat([{"role": "user", "content": "x"}])
    assert engine.attempts == 1
    started = FlakyEngine([ServiceUnavailableError("503", status_code=503, retry_after=0.0)], fail_after_first_event=True)
    got: list[Event] = []
    with pytest.raises(ServiceUnavailableError):
        async for event in Client(started).stream([{"role": "user", "content": "x"}]):
            got.append(event)
    assert started.attempts == 1 and len(got) == 1 and isinstance(got[0], ReasoningDelta | ContentDelta)


async def test_reasoning_effort_none_turns_thinking_off() -> None:
    engine = ScriptedEngine(["Hi there<|close|>response<|sep|><|close|>message<|sep|>"])
    out = await Client(engine).chat([{"role": "user", "content": "x"}], reasoning_effort="none")
    assert out.message.content == "Hi there" and out.message.reasoning_content is None
    assert engine.calls[0].prompt.endswith("<|open|>response<|sep|>")
    assert "thinking-effort" not in engine.calls[0].prompt


async def test_generate_from_an_encoded_prompt_streaming_and_not() -> None:
    engine = ScriptedEngine([CALL, CALL])
    request = ChatRequest(messages=[])
    async with engine.stream(request, prompt_ids=[1, 2, 3]) as call:
        events = [e async for e in call]
    assert events and isinstance(call.completion, ChatCompletion) and call.completion.usage.prompt_tokens == 3
    assert call.completion.message.tool_calls is not None
    done = await engine.complete(ChatRequest(messages=[]), prompt_ids=[1, 2, 3, 4])
    assert done.finish_reason == "tool_calls" and done.usage.prompt_tokens == 4
    assert engine.calls == []  # nothing was encoded


async def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected option\\(s\\) temprature"):
        await Client(ScriptedEngine([ANSWER])).chat([{"role": "user", "content": "x"}], temprature=0.5)  # type: ignore[call-arg]


@pytest.mark.parametrize("chunk_size", [16, 5])
async def test_a_cancel_during_a_scripted_stream_lands_at_the_next_chunk(chunk_size: int) -> None:
    """Issue 44: only a call's first chunk yields to the event loop; the later ones still check
    for cancellation, so a cancelled consumer gets no chunk after the one it cancelled in."""
    engine = ScriptedEngine([render_output({"content": "abcdefghij" * 20})], chunk_size=chunk_size)
    text = []
    with anyio.CancelScope() as scope:
        async with Client(engine).stream([{"role": "user", "content": "x"}]) as call:
            async for event in call:
                if isinstance(event, ContentDelta):
                    text.append(event.delta)
                    scope.cancel()
    assert scope.cancelled_caught
    assert 0 < len("".join(text)) <= chunk_size  # the first content chunk's text, then nothing
