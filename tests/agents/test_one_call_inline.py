"""A turn's only tool call runs in the run's own task, without a task group (issue 44, point 1);
two or more still run concurrently, each in a task of its own. What a task group gave the single
call stays: the run's cancellation cancels it and still leaves its result message, a
``CancelledError`` the tool raised itself is its error result, ``KeyboardInterrupt`` reaches the
caller as itself."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from kimik3 import Agent, ScriptedEngine, ToolMessage, tool
from kimik3.agents import _agent
from kimik3.formats.k3 import render_output
from kimik3.types import Message

pytestmark = pytest.mark.skipif(not _agent.INLINE_ONE_CALL, reason="Python 3.10: every call in a task group")


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "plan", "content": "", "tool_calls": [
        {"id": f"c{i}", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(items)]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "done", "content": text})


def tool_texts(messages: list[Message]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


async def test_a_lone_sync_call_runs_without_a_task_group_and_the_rest_in_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Task groups the tool step opens: none for a turn's only call of a sync tool (its code runs
    in a worker thread), one for a lone async call (it could cancel the task it runs in) and one
    for two calls (concurrent)."""
    opened: list[int] = []
    real = anyio.create_task_group

    def counting() -> anyio.abc.TaskGroup:
        opened.append(len(opened))
        return real()

    @tool
    def plain(name: str) -> str:
        """A sync tool."""
        return name.upper()

    @tool
    async def coro(name: str) -> str:
        """An async tool."""
        return name

    engine = ScriptedEngine([calls(("plain", {"name": "a"})), calls(("coro", {"name": "b"})),
                             calls(("plain", {"name": "c"}), ("plain", {"name": "d"})), answer("ok")])
    agent = Agent(tools=[plain, coro], engine=engine)
    monkeypatch.setattr(_agent.anyio, "create_task_group", counting)
    result = await agent.run("go")
    assert tool_texts(result.messages) == ["A", "b", "C", "D"]
    assert len(opened) == 2  # the async call's group and the pair's: none for the lone sync call
    assert result.output == "ok"


async def test_a_lone_async_tool_cancelling_its_own_task_fails_alone_and_the_run_goes_on() -> None:
    @tool
    async def cancels_itself() -> str:
        """Cancels the task it runs in."""
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(60)
        return "unreachable"

    engine = ScriptedEngine([calls(("cancels_itself", {})), answer("fine")])
    result = await Agent(tools=[cancels_itself], engine=engine).run("x")
    assert tool_texts(result.messages) == ["Error: CancelledError (raised by the code itself: nothing cancelled it)"]
    assert result.output == "fine"


async def test_the_runs_cancellation_cancels_the_one_call_and_leaves_its_result_message() -> None:
    cancelled: list[str] = []
    entered = anyio.Event()

    @tool
    async def waits() -> str:
        """Waits until cancelled."""
        entered.set()
        try:
            await anyio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append("waits")
            raise
        return "woke"

    history: list[Message] = []
    task = asyncio.ensure_future(Agent(tools=[waits], engine=ScriptedEngine([calls(("waits", {}))])).run(
        "x", messages=history))
    await entered.wait()
    task.cancel()  # asyncio's own cancellation of the task running the agent (as wait_for does)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == ["waits"]
    assert tool_texts(history) == ["Error: the tool call was cancelled before it finished"]


async def test_a_cancel_scope_around_the_run_cancels_the_one_call_too() -> None:
    history: list[Message] = []
    entered = anyio.Event()

    @tool
    async def waits() -> str:
        """Waits until cancelled."""
        entered.set()
        await anyio.sleep(60)
        return "woke"

    agent = Agent(tools=[waits], engine=ScriptedEngine([calls(("waits", {}))]))
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(agent.run, "x", messages=history))
        await entered.wait()
        group.cancel_scope.cancel()
    assert tool_texts(history) == ["Error: the tool call was cancelled before it finished"]


async def test_a_cancelled_error_the_one_call_raises_itself_is_its_error_and_the_run_goes_on() -> None:
    @tool
    async def raises(text: str) -> str:
        """Raises CancelledError though nothing cancelled it."""
        raise asyncio.CancelledError(text)

    engine = ScriptedEngine([calls(("raises", {"text": "mine"})), answer("fine")])
    result = await Agent(tools=[raises], engine=engine).run("x")
    assert tool_texts(result.messages) == ["Error: CancelledError: mine (raised by the code itself: nothing cancelled it)"]
    assert result.output == "fine"


async def test_keyboard_interrupt_of_the_one_call_reaches_the_caller_after_its_result_message() -> None:
    @tool
    async def interrupts() -> str:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    history: list[Message] = []
    with pytest.raises(KeyboardInterrupt):
        await Agent(tools=[interrupts], engine=ScriptedEngine([calls(("interrupts", {}))])).run("x", messages=history)
    assert tool_texts(history) == ["Error: the tool call was cancelled before it finished"]


async def test_a_sync_lone_call_raising_cancelled_error_is_its_error_and_the_run_goes_on() -> None:
    @tool
    def raises(text: str) -> str:
        """Raises CancelledError in its thread though nothing cancelled it."""
        raise asyncio.CancelledError(text)

    engine = ScriptedEngine([calls(("raises", {"text": "mine"})), answer("fine")])
    result = await Agent(tools=[raises], engine=engine).run("x")
    assert tool_texts(result.messages) == ["Error: CancelledError: mine (raised by the code itself: nothing cancelled it)"]
    assert result.output == "fine"


async def test_the_runs_cancellation_during_a_lone_sync_call_leaves_its_result_message() -> None:
    import threading

    entered = threading.Event()
    release = threading.Event()

    @tool
    def blocks() -> str:
        """Blocks in its thread until released."""
        entered.set()
        release.wait(30)
        return "late"

    history: list[Message] = []
    task = asyncio.ensure_future(Agent(tools=[blocks], engine=ScriptedEngine([calls(("blocks", {}))])).run(
        "x", messages=history))
    await anyio.to_thread.run_sync(entered.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert tool_texts(history) == ["Error: the tool call was cancelled before it finished"]
