"""Sub-agents through the ``task`` tool: scripted parent and children over one engine."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from kimik3 import Agent, RunResult, ScriptedEngine
from kimik3._exceptions import APIConnectionError
from kimik3.harness import FEATURES, SUBAGENT_INSTRUCTIONS, CodingHarness
from kimik3.types import Message

from .helpers import answer, calls


def is_child(messages: list[Message]) -> bool:
    return messages[0].content == SUBAGENT_INSTRUCTIONS


def user_task(messages: list[Message]) -> str:
    return str(next(m.content for m in messages if m.role == "user"))


async def test_parallel_children_really_run_concurrently_and_their_answers_return(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A-content\n")
    (tmp_path / "b.txt").write_text("B-content\n")
    arrived = 0
    both = anyio.Event()

    async def script(messages: list[Message]) -> str:
        nonlocal arrived
        if not is_child(messages):
            if not any(m.role == "tool" for m in messages):
                return calls(("task", {"description": "read a", "prompt": "Read a.txt", "tools": ["read_file"]}),
                             ("task", {"description": "read b", "prompt": "Read b.txt"}))
            return answer("both read")
        task = user_task(messages)
        if not any(m.role == "tool" for m in messages):
            arrived += 1
            if arrived == 2:
                both.set()
            with anyio.fail_after(10):  # a rendezvous: only passes if both children run at once
                await both.wait()
            return calls(("read_file", {"path": task.split()[-1]}))
        return answer(f"{task.split()[-1]} says " + str(messages[-1].content).split("\t")[1])

    session = tmp_path / "parent.jsonl"
    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(engine=ScriptedEngine(script))
    result = await agent.run("read both", session=session)
    assert result.output == "both read"
    results = [m.content for m in result.messages if m.role == "tool"]
    assert [r.split("\n")[0] for r in results] == ["a.txt says A-content", "b.txt says B-content"]
    assert all(r.split("\n")[1].startswith("[sub-agent: 2 turns, ") for r in results)
    links = [json.loads(line)["child_session"] for line in session.read_text().splitlines()
             if line.startswith('{"child_session"')]
    assert [link["description"] for link in links] == ["read a", "read b"]
    for link in links:
        child = Path(link["path"])
        assert child.parent == tmp_path and child.name.startswith("parent.task-")
        child_lines = [json.loads(line) for line in child.read_text().splitlines()]
        assert child_lines[0]["instructions"] == SUBAGENT_INSTRUCTIONS
    first_child_tools = json.loads(Path(links[0]["path"]).read_text().splitlines()[0])["tools"]
    assert first_child_tools == ["read_file"]  # the subset the parent asked for


async def test_a_failing_child_gives_an_error_result_and_the_parent_goes_on(tmp_path: Path) -> None:
    def script(messages: list[Message]) -> str:
        if is_child(messages):
            raise APIConnectionError("engine went away")
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "doomed", "prompt": "do it"}))
        return answer("the sub-agent failed")

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(engine=ScriptedEngine(script))
    result = await agent.run("go")
    tool_msg = next(m for m in result.messages if m.role == "tool")
    assert tool_msg.content == "Error: the sub-agent failed: APIConnectionError: engine went away"
    assert result.output == "the sub-agent failed"


async def test_unknown_tool_for_a_child_and_no_recursion(tmp_path: Path) -> None:
    def script(messages: list[Message]) -> str:
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "x", "prompt": "p", "tools": ["task"]}))
        return answer("ok")

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(engine=ScriptedEngine(script))
    result = await agent.run("go")
    tool_msg = next(m for m in result.messages if m.role == "tool")
    assert str(tool_msg.content).startswith("Error: ToolError: unknown tool(s) for a sub-agent: task; available: ")


@pytest.mark.parametrize("turns", [1])
async def test_a_child_out_of_budget_returns_its_summary_with_a_note(tmp_path: Path, turns: int) -> None:
    from kimik3 import Budgets

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            if messages[-1].role == "system":  # the budget's summary turn
                return answer("partial result")
            return calls(("glob", {"pattern": "*"}))
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "long", "prompt": "p"}))
        return answer("ok")

    harness = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}, subagent_budgets=Budgets(turns=turns))
    result = await harness.agent(engine=ScriptedEngine(script)).run("go")
    tool_msg = next(m for m in result.messages if m.role == "tool")
    assert str(tool_msg.content).startswith("partial result\n[the sub-agent stopped early: turn_budget]\n[sub-agent: 2 turns")


async def test_a_childs_edits_are_in_the_parents_checkpoint(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from kimik3.harness import session_checkpoints, undo

    if shutil.which("git") is None:
        pytest.skip("needs git")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f.txt").write_text("before\n")

    def script(messages: list[Message]) -> str:
        done = any(m.role == "tool" for m in messages)
        if is_child(messages):
            return answer("wrote it") if done else calls(("write_file", {"path": "f.txt", "content": "child\n"}))
        return answer("ok") if done else calls(("task", {"description": "write", "prompt": "overwrite f.txt"}))

    session = tmp_path.parent / f"{tmp_path.name}.jsonl"
    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "read_before_edit"}).agent(engine=ScriptedEngine(script))
    await agent.run("go", session=session)
    assert (tmp_path / "f.txt").read_text() == "child\n"
    assert [(r["turn"], r["changed"]) for r in session_checkpoints(session)] == [(1, ["f.txt"])]
    assert undo(session, workspace=tmp_path) == ["f.txt"]
    assert (tmp_path / "f.txt").read_text() == "before\n"


async def test_child_sessions_are_numbered_in_start_order(tmp_path: Path) -> None:
    """Numbered, so a server that reuses call ids across turns cannot make two children share a file."""
    import re

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            return answer(f"child of {user_task(messages)}")
        n = sum(m.role == "tool" for m in messages)
        return calls(("task", {"description": f"job {n}", "prompt": f"job {n}"})) if n < 2 else answer("ok")

    session = tmp_path / "p.jsonl"
    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(engine=ScriptedEngine(script))
    await agent.run("go", session=session)
    links = [json.loads(line)["child_session"] for line in session.read_text().splitlines()
             if line.startswith('{"child_session"')]
    names = [Path(link["path"]).name for link in links]
    assert [re.sub(r"call_[0-9a-f]{24}", "ID", n) for n in names] == ["p.task-1-ID.jsonl", "p.task-2-ID.jsonl"]
    for n, link in enumerate(links):
        lines = [json.loads(line) for line in Path(link["path"]).read_text().splitlines()]
        assert lines[-1]["run_end"]["stop_reason"] == "completed"  # why the child ended (issue 41)
        assert lines[-2]["message"]["content"] == f"child of job {n}"


async def test_children_share_the_parents_token_budget(tmp_path: Path) -> None:
    """A parent with tokens=T: its children together get at most T; past it task is an error."""
    from kimik3 import Budgets

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            if messages[-1].role == "system":  # the budget's summary turn
                return answer("partial")
            return calls(("glob", {"pattern": "*"}))  # never done on its own
        done = sum(m.role == "tool" for m in messages)
        return calls(("task", {"description": f"job {done}", "prompt": "p"})) if done < 3 else answer("ok")

    harness = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}, subagent_budgets=Budgets(turns=40))
    agent = harness.agent(engine=ScriptedEngine(script), budgets=Budgets(tokens=6000))
    result = await agent.run("go")
    assert harness_children(agent)[0].stop_reason == "token_budget"
    assert len(harness_children(agent)) == 1  # the later tasks were refused
    # a budget ends a run after the call that crosses it, plus its summary call (~2.5k tokens each)
    assert 6000 <= harness_children(agent)[0].usage.total_tokens < 6000 + 2 * 3000
    results = [str(m.content) for m in result.messages if m.role == "tool"]
    assert results[0].startswith("partial\n[the sub-agent stopped early: token_budget]")
    assert len(results) == 3 and results[1] == results[2] == ("Error: ToolError: the sub-agents of this run have used up the run's token budget "
                           "(6000 tokens); do the rest yourself")


def harness_children(agent: Agent[str]) -> list[RunResult[str]]:
    from kimik3.harness import SubAgents

    subs = next(h for h in agent.hooks.hooks if isinstance(h, SubAgents))
    return [r for _, _, r in subs.children if isinstance(r, RunResult)]


@pytest.mark.parametrize("decision", ["defer", "deny"])
async def test_a_hook_that_defers_a_tool_governs_it_in_sub_agents(tmp_path: Path, decision: str) -> None:
    """Issue 40: docs/approvals.md's hook (defer one tool, allow the rest) was bypassed through
    ``task``: the sub-agent's call asked nobody and ran. Now the child's calls go through the
    parent's hook; one it defers is denied in the child (which cannot wait), so nothing is
    written. Variant: a hook that denies outright is obeyed in the child the same way."""
    from kimik3 import Allow, Defer, Deny
    from kimik3.agents import PendingCall
    from kimik3.harness._tasks import CHILD_DEFERRED

    asked: list[tuple[str, dict[str, object]]] = []

    def hook(call: PendingCall) -> Allow | Defer | Deny:
        asked.append((call.name, call.arguments))
        if call.name != "write_file":
            return Allow()
        return Defer() if decision == "defer" else Deny("no writes")

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            if not any(m.role == "tool" for m in messages):
                return calls(("write_file", {"path": "planted.txt", "content": "x"}))
            return answer(str(messages[-1].content))
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "write it", "prompt": "write planted.txt"}))
        return answer("done")

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(
        engine=ScriptedEngine(script), approval=hook)
    result = await agent.run("go", session=tmp_path / "parent.jsonl")
    assert not (tmp_path / "planted.txt").exists()
    assert asked == [("task", {"description": "write it", "prompt": "write planted.txt"}),
                     ("write_file", {"path": "planted.txt", "content": "x"})]
    reason = CHILD_DEFERRED if decision == "defer" else "no writes"
    [task_result] = [m.content for m in result.messages if m.role == "tool"]
    assert str(task_result).startswith(f"Error: the user denied this call: {reason}\n[sub-agent: 2 turns, ")
    assert result.stop_reason == "completed"


async def test_a_parent_session_in_a_memory_store_leaves_no_child_file_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session kept in a store of the user's has no folder: its sub-agents' sessions are not
    written beside a made-up path (before: a file ``memory:p.task-1-….jsonl`` in the cwd)."""
    from kimik3.agents import MemoryStore, SessionLog

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            return answer("child done")
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "d", "prompt": "p"}))
        return answer("done")

    store = MemoryStore("p")
    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(
        engine=ScriptedEngine(script))
    result = await agent.run("go", session=store)
    assert result.output == "done" and list(cwd.iterdir()) == []
    assert SessionLog.read(store).bodies("child_session") == []
    assert SessionLog.read(store).header["workspace"] == str(tmp_path.resolve())


@pytest.mark.parametrize("again", ["new run, same --session", "resumed session"])
async def test_a_leftover_child_session_never_breaks_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          again: str) -> None:
    """Issue 40: call ids a server repeats (``functions.task:0``) named the child's file of the
    second run as the first run's; the child then refused a file holding another conversation and
    ``task`` failed. A child's session is always a new file: the leftover is skipped, untouched."""
    import kimik3.formats.k3._parse as parse

    monkeypatch.setattr(parse, "new_tool_call_id", lambda: "functions.task:0")

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            return answer(f"child did {user_task(messages)}")
        return calls(("task", {"description": "job", "prompt": "the job"})) if messages[-1].role == "user" \
            else answer(str(messages[-1].content).split("\n")[0])

    session = tmp_path / "p.jsonl"
    harness = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"})
    first = await harness.agent(engine=ScriptedEngine(script)).run("go", session=session)
    leftover = tmp_path / "p.task-1-functions.task_0.jsonl"
    assert first.output == "child did the job" and leftover.exists()
    before = leftover.read_bytes()
    if again == "new run, same --session":
        session.unlink()  # the parent gone, its child's file left
        second = await harness.agent(engine=ScriptedEngine(script)).run("go", session=session)
    else:
        second = await harness.agent(engine=ScriptedEngine(script)).resume(session, "go again")
    assert second.output == "child did the job" and not second.issues
    assert leftover.read_bytes() == before
    links = [json.loads(line)["child_session"]["path"] for line in session.read_text().splitlines()
             if line.startswith('{"child_session"')]
    assert links[-1] == str(tmp_path / "p.task-2-functions.task_0.jsonl")
async def test_a_sub_agent_that_loops_ends_and_the_parent_gets_its_result(tmp_path: Path) -> None:
    """Issue 41: a child repeating one read ends with loop_detected; the parent reads why and goes on."""
    (tmp_path / "a.txt").write_text("A-content\n")

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            return calls(("read_file", {"path": "a.txt"}))  # again and again
        if not any(m.role == "tool" for m in messages):
            return calls(("task", {"description": "read a", "prompt": "Read a.txt"}))
        return answer("the sub-agent looped")

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(engine=ScriptedEngine(script))
    result = await agent.run("read a")
    assert (result.stop_reason, result.output) == ("completed", "the sub-agent looped")
    (child,) = [str(m.content) for m in result.messages if m.role == "tool"]
    assert child.split("\n")[1].startswith("[the sub-agent stopped early: loop_detected]")
    assert "[sub-agent: 8 turns, " in child


async def test_a_leftover_child_checkpoint_store_never_breaks_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant (a40c): the leftover is not the child's session file but what kimik3 keeps beside
    it, the checkpoint store (the user deleted the sessions, not the stores): a new run with the
    same --session and the same call id makes its child anew, its files written."""
    import kimik3.formats.k3._parse as parse

    monkeypatch.setattr(parse, "new_tool_call_id", lambda: "functions.task:0")
    ws = tmp_path / "ws"
    ws.mkdir()

    def script(messages: list[Message]) -> str:
        if is_child(messages):
            if messages[-1].role == "user":
                return calls(("write_file", {"path": "c.txt", "content": user_task(messages)}))
            return answer("child wrote")
        return calls(("task", {"description": "job", "prompt": "the job"})) if messages[-1].role == "user" \
            else answer(str(messages[-1].content).split("\n")[0])

    session = tmp_path / "p.jsonl"
    harness = CodingHarness(ws, features=FEATURES - {"background"})
    first = await harness.agent(engine=ScriptedEngine(script)).run("go", session=session)
    assert first.output == "child wrote" and not first.issues
    for p in tmp_path.glob("p*.jsonl"):
        p.unlink()  # the sessions gone, whatever kimik3 kept beside them left
    (ws / "c.txt").unlink()
    second = await harness.agent(engine=ScriptedEngine(script)).run("go", session=session)
    assert second.output == "child wrote" and not second.issues, second.issues
    assert (ws / "c.txt").read_text() == "the job"
