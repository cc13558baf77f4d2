"""ModelCall misuse is a UserError: iterating a consumed call again (it would silently yield
nothing), two tasks iterating one call (it was asyncgen's 'aclose(): already running')."""

from __future__ import annotations

import asyncio

import pytest

from kimik3 import Agent, Client, EngineError, MediaError, ScriptedEngine, UserError
from kimik3.engines import CallSource, ModelCall
from kimik3.formats.k3 import ContentDelta, render_output
from kimik3.types import ChatRequest


def _answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


async def test_iterating_a_consumed_call_again_is_a_user_error() -> None:
    client = Client(ScriptedEngine([_answer("hello world")], chunk_size=2))
    async with client.stream([{"role": "user", "content": "hi"}]) as call:
        first = [e async for e in call]
        assert "".join(e.delta for e in first if isinstance(e, ContentDelta)) == "hello world"
        with pytest.raises(UserError, match="already consumed"):
            [e async for e in call]
        assert call.completion.choices[0].message.content == "hello world"
        assert (await call.get()).choices[0].message.content == "hello world"  # get() stays fine


async def test_break_then_continue_is_allowed() -> None:
    client = Client(ScriptedEngine([_answer("hello world")], chunk_size=1))
    async with client.stream([{"role": "user", "content": "hi"}]) as call:
        async for _ in call:
            break
        rest = [e async for e in call]
        assert rest and call.completion.choices[0].message.content == "hello world"


async def test_two_tasks_iterating_one_call_is_a_user_error() -> None:
    client = Client(ScriptedEngine([_answer("hello world " * 50)], chunk_size=1))
    with pytest.raises(UserError, match="another task is iterating this model call"):
        async with client.stream([{"role": "user", "content": "hi"}]) as call:

            async def eat() -> int:
                return len([e async for e in call])

            await asyncio.gather(eat(), eat())


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/x.png", "https://example.com/cat.jpg"])
async def test_token_engine_refuses_http_image_urls(url: str) -> None:
    engine = ScriptedEngine([_answer("ok")])
    message = {"role": "user", "content": [{"type": "text", "text": "describe"}, {"type": "image_url", "image_url": {"url": url}}]}
    with pytest.raises(MediaError, match=r"ScriptedEngine encodes the prompt locally and fetches no image URL"):
        await Client(engine).chat([message])
    assert engine.remaining == 1  # nothing was generated


class _Cut(ScriptedEngine):
    """An engine whose call source stops after one event, before its completion."""

    def __init__(self) -> None:
        super().__init__([_answer("unused")])
        self.closed: list[str] = []

    def stream(self, request: ChatRequest, **_: object) -> ModelCall:
        async def source() -> CallSource:
            try:
                yield ContentDelta(delta="partial")
            finally:
                self.closed.append("source")

        return ModelCall(source())


async def test_an_engine_stream_that_ends_without_a_completion_is_an_engine_error_and_closed() -> None:
    """The Client iterates the engine call's source itself (ModelCall.source: one wrapper per
    event, issue 44): a source that stops before its completion is still an EngineError, after the
    events it gave, and the source is closed."""
    engine = _Cut()
    seen: list[object] = []
    with pytest.raises(EngineError, match="the engine's stream ended without a completion"):
        async with Client(engine).stream([{"role": "user", "content": "hi"}]) as call:
            async for event in call:
                seen.append(event)
    assert seen == [ContentDelta(delta="partial")] and engine.closed == ["source"]


async def test_an_agent_over_a_stream_that_ends_without_a_completion_raises_the_engine_error() -> None:
    """The Agent iterates the client call's source too (issue 44): the same EngineError, after
    the event, and the engine's source closed."""
    engine = _Cut()
    seen: list[object] = []
    with pytest.raises(EngineError, match="the engine's stream ended without a completion"):
        async for event in Agent(engine=engine).run_stream("hi"):
            seen.append(event)
    assert seen == [ContentDelta(delta="partial")] and engine.closed == ["source"]
