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


async def test_one_call_runs_in_the_runs_task_and_two_in_tasks_of_their_own() -> None:
    seen: list[tuple[str, bool]] = []
    run_task: list[asyncio.Task[Any]] = []
    both = anyio.Event()
    waiting = [0]

    @tool
    async def where(name: str) -> str:
        """Says whether it runs in the run's task; two calls of one turn wait for each other."""
        seen.append((name, asyncio.current_task() is run_task[0]))
        if name != "alone":
            waiting[0] += 1
            if waiting[0] == 2:
                both.set()
            await both.wait()  # both are running at once: concurrent
        return name

    engine = ScriptedEngine([calls(("where", {"name": "alone"})),
                             calls(("where", {"name": "a"}), ("where", {"name": "b"})), answer("ok")])
    agent = Agent(tools=[where], engine=engine)

    async def run() -> Any:
        task = asyncio.current_task()
        assert task is not None
        run_task.append(task)
        return await agent.run("go")

    result = await run()
    assert seen == [("alone", True), ("a", False), ("b", False)]
    assert tool_texts(result.messages) == ["alone", "a", "b"]
    assert result.output == "ok"


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
