"""Checkpoints of a turn whose tools run twice: the calls allowed when the turn was made, then
the calls a person approved (Defer, then Agent.resume(approvals=...)) under the same turn
number. Both phases are recorded, no copy or ref of the first is overwritten, and undo puts back
what both changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kimik3 import Allow, Defer, ScriptedEngine
from kimik3.agents import PendingCall
from kimik3.harness import CodingHarness, session_checkpoints, undo

from .helpers import answer, calls, git, make_repo

TURN = calls(("write_file", {"path": "a.txt", "content": "A1"}), ("write_file", {"path": "b.txt", "content": "B1"}))


def defer_b(call: PendingCall) -> Allow | Defer:
    return Defer() if call.arguments.get("path") == "b.txt" else Allow()


async def two_phases(ws: Path, session: Path) -> None:
    harness = CodingHarness(ws, features={"checkpoints"}, sandbox="none", skills=False)
    first = await harness.agent(engine=ScriptedEngine([TURN]), approval=defer_b).run("write", session=session)
    assert first.stop_reason == "approval_required"
    assert (ws / "a.txt").read_text() == "A1" and (ws / "b.txt").read_text() == "B0"
    [pending] = first.pending_approvals
    # the same harness and process (the refs' names would collide there), the approved call
    agent = harness.agent(engine=ScriptedEngine([answer("done")]))
    done = await agent.resume(session, approvals={pending.id: Allow()})
    assert done.stop_reason == "completed" and (ws / "b.txt").read_text() == "B1"


async def test_copy_checkpoints_of_both_phases_and_undo(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("A0")
    (ws / "b.txt").write_text("B0")
    session = tmp_path / "s.jsonl"
    await two_phases(ws, session)
    records = session_checkpoints(session)
    assert [(r["turn"], r["kind"], r["changed"], r["files"]) for r in records] == [
        (1, "copy", ["a.txt"], {"a.txt": "0.bin"}),
        (1, "copy", ["b.txt"], {"b.txt": "2.bin"}),  # after the first phase's copies (0, 1)
    ]
    assert sorted(p.name for p in (tmp_path / "s.jsonl.checkpoints" / "turn-1").iterdir()) == [
        "0.bin", "1.bin", "2.bin"]
    assert undo(session, 0, workspace=ws) == ["a.txt", "b.txt"]
    assert (ws / "a.txt").read_text() == "A0" and (ws / "b.txt").read_text() == "B0"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_git_checkpoints_of_both_phases_keep_their_own_refs_and_undo(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("A0")
    (repo / "b.txt").write_text("B0")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two files")
    session = tmp_path / "s.jsonl"
    await two_phases(repo, session)
    records = session_checkpoints(session)
    assert [(r["turn"], r["changed"]) for r in records] == [(1, ["a.txt"]), (1, ["b.txt"])]
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/kimik3").splitlines()
    assert sorted(line.rsplit("/", 1)[1] for line in refs) == sorted(
        [f"turn-1 {records[0]['after']}", f"turn-1.2 {records[1]['after']}"])
    assert undo(session, 0, workspace=repo) == ["a.txt", "b.txt"]
    assert (repo / "a.txt").read_text() == "A0" and (repo / "b.txt").read_text() == "B0"
