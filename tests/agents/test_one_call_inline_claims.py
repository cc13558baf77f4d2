"""Only a call whose step runs no code of the user's on the event loop runs inline as a turn's lone
call: a ``FunctionTool`` subclass that overrides ``run`` or ``validate`` (``Tool.in_thread``), an
approval hook, a tool guardrail or a ``tool_result`` hook runs code in the caller's task, so the
call keeps a task of its own, and cancelling that task fails the call alone instead of cancelling
the run (attack 4 on ``INLINE_ONE_CALL``)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import Agent, Allow, GuardrailResult, ScriptedEngine, tool_input_guardrail, tool_output_guardrail
from kimik3.agents import PendingCall, RunHooks, _agent
from kimik3.harness import ProjectInstructions, ReadTracker
from kimik3.tools import FunctionTool, ToolContext, ToolResult
from kimik3.types import ToolCall
from tests.agents.test_one_call_inline import answer, calls, tool_texts

pytestmark = pytest.mark.skipif(not _agent.INLINE_ONE_CALL, reason="Python 3.10: every call in a task group")

STRAY = "Error: CancelledError (raised by the code itself: nothing cancelled it)"


def plain(name: str) -> str:
    """A sync tool.

    Args:
        name: a name.
    """
    return name.upper()


class AuditedRun(FunctionTool):
    """Async code of its own around the sync function: it cancels the task it runs in."""

    async def run(self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None, *,
                  timeout: float | None = None) -> ToolResult:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)
        return await super().run(arguments, context, timeout=timeout)


class CheckedValidate(FunctionTool):
    """Sync code of its own on the loop (validate runs in the caller's task): it cancels that task."""

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return super().validate(arguments)


class Renamed(FunctionTool):
    """A subclass that changes no code on the loop."""


def test_in_thread_holds_only_for_function_tools_own_code() -> None:
    assert [t.in_thread for t in (FunctionTool(plain), Renamed(plain), AuditedRun(plain), CheckedValidate(plain))] \
        == [True, True, False, False]
    guarded = ReadTracker(".").wrap([FunctionTool(plain, name="read_file")])[0]
    assert type(guarded).__name__ == "_Guarded" and guarded.in_thread is False  # the read-before-edit guard


@pytest.mark.parametrize("cls", [AuditedRun, CheckedValidate])
def test_a_subclass_cancelling_its_own_task_fails_alone(cls: type[FunctionTool]) -> None:
    agent = Agent(tools=[cls(plain)], engine=ScriptedEngine([calls(("plain", {"name": "a"})), answer("went on")]))
    result = anyio.run(agent.run, "go")
    assert (result.stop_reason, result.output, tool_texts(result.messages)) == ("completed", "went on", [STRAY])


CHILD = """
import os, signal, sys, threading
import anyio
from kimik3 import Agent, Budgets, ScriptedEngine, tool
from kimik3.agents import _agent
from tests.agents.test_one_call_inline import answer, calls, tool_texts
assert _agent.INLINE_ONE_CALL
case = sys.argv[1]
never = threading.Event()

@tool
def stuck(name: str) -> str:
    '''Blocks forever (after a Ctrl-C to its own process for "sigint").'''
    if case == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
    never.wait()
    return name

agent = Agent(tools=[stuck], engine=ScriptedEngine([calls(("stuck", {"name": "a"})), answer("after")]),
              budgets=Budgets(seconds=3) if case == "budget" else Budgets())
try:
    r = anyio.run(agent.run, "go")
    print("result", r.stop_reason, r.output, tool_texts(r.messages))
except KeyboardInterrupt:
    print("KeyboardInterrupt")
    sys.exit(130)
"""


@pytest.mark.parametrize(("case", "code", "out"), [
    ("budget", 0, re.escape("result time_budget after ['Error: ToolTimeoutError: stuck did not finish within ") +
     r"[0-9.]+" + re.escape(" s and was abandoned (its thread may still be running)']\n")),  # what the turn left
    ("sigint", 130, "KeyboardInterrupt\n"),
])
def test_a_lone_sync_call_blocked_forever_ends_by_the_budget_or_ctrl_c(case: str, code: int, out: str) -> None:
    """Run in a child process (a generous limit, no wall-clock bound): the run's own task awaits the
    abandoned thread, so the time budget and Ctrl-C still end it, and the stuck daemon thread does
    not hold the process."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", CHILD, case], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == code and re.fullmatch(out, proc.stdout), (proc.stdout, proc.stderr)


def cancel_own_task() -> None:
    asyncio.current_task().cancel()  # type: ignore[union-attr]


async def cancelling_approval(call: PendingCall) -> Allow:
    cancel_own_task()
    await asyncio.sleep(0)
    return Allow()


class CancellingResultHook(RunHooks):
    async def tool_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        cancel_own_task()
        await asyncio.sleep(0)
        return result


@tool_input_guardrail
def cancelling_input(name: str, arguments: dict[str, Any]) -> GuardrailResult:
    cancel_own_task()  # sync code on the loop can do it too
    return GuardrailResult(False)


@tool_output_guardrail
async def cancelling_output(name: str, result: ToolResult) -> GuardrailResult:
    cancel_own_task()
    await asyncio.sleep(0)
    return GuardrailResult(False)


@pytest.mark.parametrize("around", [
    {"approval": cancelling_approval}, {"hooks": [CancellingResultHook()]}, {"guardrails": [cancelling_input]},
    {"guardrails": [cancelling_output]},
], ids=["approval", "tool_result", "tool_input", "tool_output"])
def test_user_code_around_a_lone_sync_call_cancelling_its_task_fails_the_call_alone(around: dict[str, Any]) -> None:
    agent = Agent(tools=[FunctionTool(plain)], engine=ScriptedEngine([calls(("plain", {"name": "a"})),
                                                                       answer("went on")]), **around)
    result = anyio.run(agent.run, "go")
    assert (result.stop_reason, result.output, tool_texts(result.messages)) == ("completed", "went on", [STRAY])


def test_kimik3s_own_hooks_keep_the_lone_sync_call_inline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The harness's project-instructions hook (a tool_result hook) is kimik3's code: no task group,
    the fast path stays; a user's hook of the same kind opens one (variant)."""
    opened: list[int] = []
    real = anyio.create_task_group

    def counting() -> Any:
        opened.append(1)
        return real()

    monkeypatch.setattr(_agent.anyio, "create_task_group", counting)
    for hooks, groups in (([ProjectInstructions(tmp_path)], []), ([CancelNothing()], [1])):
        opened.clear()
        agent = Agent(tools=[FunctionTool(plain)], hooks=hooks,
                      engine=ScriptedEngine([calls(("plain", {"name": "a"})), answer("ok")]))
        result = anyio.run(agent.run, "go")
        assert (result.output, tool_texts(result.messages), opened) == ("ok", ["A"], groups)


class CancelNothing(RunHooks):
    async def tool_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        return result
