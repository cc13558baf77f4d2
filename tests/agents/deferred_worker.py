"""A small program using the SDK with a ScriptedEngine, run as a separate process by
test_deferred_procs.py: an agent whose approval hook defers ``write_line`` (a side effect: a line
appended to ``effects.txt``) and allows ``note``.

    python deferred_worker.py MODE SESSION WORKDIR [BLOCK]

MODE: ``run`` (the task), ``run-all`` (the task, every call allowed), ``approve`` (record Allow for every pending call, nothing runs),
``resume`` (no approvals), ``resume-approve`` (Allow for every pending call, then go on).
BLOCK: where to stop for a ``kill -9``: ``note`` (the allowed call of the deferring turn),
``tool`` (the approved call, after its side effect), ``model`` (the model call after the
approved call's result), ``run_start`` (after the decisions are recorded, before any tool
runs). At that point the worker creates ``WORKDIR/at-<BLOCK>`` and blocks opening the FIFO
``WORKDIR/gate`` (which nobody opens for writing). Prints one JSON line: the result.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from kimik3 import Agent, Allow, Defer, ScriptedEngine, tool
from kimik3.agents import PendingCall, RunHooks, SessionWriter, pending_approvals, record_approvals
from kimik3.formats.k3 import render_output
from kimik3.types import AssistantMessage, Message, ToolMessage, message_text

MODE, SESSION, WORK = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
BLOCK = sys.argv[4] if len(sys.argv) > 4 else ""


def block_here(where: str) -> None:
    if where == BLOCK:
        (WORK / f"at-{where}").write_text(str(os.getpid()))
        with open(WORK / "gate", "rb"):  # blocks until killed: nobody writes to the gate
            pass


@tool
def note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note.
    """
    block_here("note")
    return f"noted {text}"


@tool
def write_line(text: str) -> str:
    """Append a line to the effects file.

    Args:
        text: the line.
    """
    with open(WORK / "effects.txt", "a", encoding="utf-8") as f:
        f.write(text + "\n")
    block_here("tool")
    return f"wrote {text}"


CALLS = render_output({"reasoning_content": "note it, then write it", "tool_calls": [
    {"id": "note:0", "function": {"name": "note", "arguments": json.dumps({"text": "a"})}},
    {"id": "write_line:1", "function": {"name": "write_line", "arguments": json.dumps({"text": "hello"})}}]})


def replies(messages: list[Message]) -> str:
    """The model: the two calls first; then an answer naming the last tool result."""
    if not any(isinstance(m, AssistantMessage) for m in messages):
        return CALLS
    block_here("model")
    last = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    return f"done after: {message_text(last.content)}"


def hook(call: PendingCall) -> Allow | Defer:
    return Defer() if call.name == "write_line" else Allow()


class BlockAtStart(RunHooks):
    async def run_start(self, session: SessionWriter | None) -> None:
        block_here("run_start")


def report(result: Any) -> None:
    print(json.dumps({"stop_reason": result.stop_reason, "output": result.output,
                      "pending": [[p.id, p.name, p.arguments] for p in result.pending_approvals]}), flush=True)


async def main() -> None:
    agent = Agent(tools=[note, write_line], engine=ScriptedEngine(replies), approval=hook, hooks=[BlockAtStart()])
    if MODE == "run":
        report(await agent.run("write hello", session=SESSION))
    elif MODE == "run-all":
        everything = Agent(tools=[note, write_line], engine=ScriptedEngine(replies), approval=lambda call: Allow())
        report(await everything.run("write hello", session=SESSION))
    elif MODE == "approve":
        decided = record_approvals(SESSION, {p.id: Allow() for p in pending_approvals(SESSION)})
        print(json.dumps([p.id for p in decided]), flush=True)
    elif MODE == "resume":
        report(await agent.resume(SESSION))
    elif MODE == "resume-approve":
        report(await agent.resume(SESSION, approvals={p.id: Allow() for p in pending_approvals(SESSION)}))
    else:
        raise SystemExit(f"unknown mode {MODE}")


anyio.run(main)
