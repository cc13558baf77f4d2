"""Issue 40, point 2, more variants of "a hook that defers a tool also governs it in sub-agents":
docs/approvals.md's hook as written (defer ``bash``, allow the rest; sync and async), the child's
``bash`` run in the background and beside a call the hook allows, the parent's own ``bash`` in the
same turn (it waits for a person; the child's is denied), and two children at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kimik3 import Allow, Defer, ScriptedEngine
from kimik3.agents import PendingCall
from kimik3.harness import FEATURES, CodingHarness
from kimik3.harness._tasks import CHILD_DEFERRED
from kimik3.types import Message

from .helpers import answer, calls
from .test_tasks import is_child, user_task

DENIED = f"Error: the user denied this call: {CHILD_DEFERRED}"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_docs_hook_governs_bash_in_sub_agents(tmp_path: Path, kind: str) -> None:
    asked: list[str] = []

    def ask_later(call: PendingCall) -> Defer | Allow:  # docs/approvals.md's hook, as written
        asked.append(call.name)
        return Defer() if call.name == "bash" else Allow()

    async def ask_later_async(call: PendingCall) -> Defer | Allow:
        return ask_later(call)

    child_results: dict[str, list[str]] = {}

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            task = user_task(messages)
            results = [str(m.content) for m in messages if m.role == "tool"]
            if not results:
                if task == "one":
                    return calls(("bash", {"command": "touch one.txt"}), ("read_file", {"path": "seen.txt"}))
                return calls(("bash", {"command": "touch two.txt", "background": True}))
            child_results[task] = results
            return answer("done " + task)
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "one", "prompt": "one"}),
                         ("task", {"description": "two", "prompt": "two"}),
                         ("bash", {"command": "touch parent.txt"}))
        return answer("never")

    (tmp_path / "seen.txt").write_text("seen\n")
    hook: Any = ask_later if kind == "sync" else ask_later_async
    agent = CodingHarness(tmp_path, features=FEATURES - {"checkpoints"}, sandbox="none").agent(
        engine=ScriptedEngine(script), approval=hook)
    result = await agent.run("go", session=tmp_path / "parent.jsonl")
    made = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("parent.task-"))
    assert made == ["parent.jsonl", "seen.txt"]  # nothing touched: no one.txt, two.txt or parent.txt
    assert result.stop_reason == "approval_required"
    assert [(p.name, p.arguments) for p in result.pending_approvals] == [("bash", {"command": "touch parent.txt"})]
    assert child_results["one"][0] == DENIED and child_results["one"][1].endswith("seen")
    assert child_results["two"] == [DENIED]
    assert sorted(asked) == ["bash", "bash", "bash", "read_file", "task", "task"]
