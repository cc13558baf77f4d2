"""Only a tool whose code on the event loop is FunctionTool's own runs inline as a turn's lone call
(``Tool.in_thread``): a ``FunctionTool`` subclass that overrides ``run`` or ``validate`` runs code
of its own in the caller's task, so it keeps a task of its own, and cancelling that task fails
the call alone instead of cancelling the run (attack 4 on ``INLINE_ONE_CALL``)."""

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

from kimik3 import Agent, ScriptedEngine
from kimik3.agents import _agent
from kimik3.harness import ReadTracker
from kimik3.tools import FunctionTool, ToolContext, ToolResult
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
