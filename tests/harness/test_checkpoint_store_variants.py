"""Issue 40, point 1, more variants of the kind "checkpoint copies are the model's to rewrite":
a session reached through a workspace symlink that a command re-points mid-run (kimik3's later
copies must not follow it, nor its sub-agents' sessions), a copy folder swapped for a symlink
before undo, and a file over the copy limit that is not sparse."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import CheckpointError
from kimik3.agents import SessionLog
from kimik3.harness import FEATURES, SUBAGENT_INSTRUCTIONS, CodingHarness, session_checkpoints, undo
from kimik3.harness._store import seed_index
from kimik3.types import Message

from .helpers import answer, calls
from .test_checkpoint_store import edit, run_turns


async def test_a_session_folder_symlink_re_pointed_mid_run_is_not_followed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    sessions, elsewhere = tmp_path / "sessions", tmp_path / "elsewhere"
    sessions.mkdir()
    elsewhere.mkdir()
    (ws / "lnk").symlink_to(sessions)  # the user's session folder, reached through the workspace
    session = ws / "lnk" / "run.jsonl"
    await run_turns(ws, session, edit("a.txt", "one", "two"),
                    calls(("bash", {"command": f"rm lnk && ln -s {elsewhere} lnk"})),  # as a command could
                    edit("a.txt", "two", "three"))
    assert list(elsewhere.iterdir()) == []  # no store made where the re-pointed link leads
    store = sessions / "run.jsonl.checkpoints"
    assert sorted(p.name for p in store.iterdir()) == ["turn-1", "turn-2", "turn-3"]  # bash's turn too
    assert (store / "turn-3" / "0.bin").read_text() == "two\n"
    records = session_checkpoints(sessions / "run.jsonl", workspace=ws)
    assert [r["dir"] for r in records] == [store / f"turn-{n}" for n in (1, 2, 3)]
    assert undo(sessions / "run.jsonl", workspace=ws, partial=True) == ["a.txt"] and (ws / "a.txt").read_text() == "one\n"


async def test_a_copy_folder_swapped_for_a_symlink_is_never_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    session = tmp_path / "run.jsonl"
    await run_turns(ws, session, edit("a.txt", "before", "after"))
    store = tmp_path / "run.jsonl.checkpoints"
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "0.bin").write_text("before\n")  # the right bytes, elsewhere
    (store / "turn-1").rename(tmp_path / "moved")
    (store / "turn-1").symlink_to(forged)
    with pytest.raises(CheckpointError, match=r"cannot read the copy of a.txt .*: Not a directory "
                                              r"\(a symlink is never followed\); nothing was changed"):
        undo(session, workspace=ws)
    assert (ws / "a.txt").read_text() == "after\n"


async def test_a_file_over_the_copy_limit_is_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kimik3.harness._store.MAX_COPY_BYTES", 1000)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("y" * 2000)  # dense: every block on disk
    (ws / "a.txt").write_text("before\n")
    session = tmp_path / "run.jsonl"
    await run_turns(ws, session, calls(("write_file", {"path": "big.txt", "content": "x"}),
                                       ("edit_file", {"path": "a.txt", "old_string": "before", "new_string": "after"})))
    [record] = session_checkpoints(session, workspace=ws)
    assert record["uncovered"] == {"big.txt": "not copied: 2000 bytes, over the 1000 bytes a checkpoint copies; "
                                              "undo cannot restore it"}
    assert record["copied"] == {"a.txt": hashlib.sha256(b"before\n").hexdigest()}
    assert sorted(p.name for p in (tmp_path / "run.jsonl.checkpoints" / "turn-1").iterdir()) == ["0.bin"]
    with pytest.raises(CheckpointError, match=r"do not cover: big\.txt"):
        undo(session, workspace=ws)
    assert (ws / "big.txt").read_text() == "x"


async def test_a_sub_agent_session_is_not_made_where_a_re_pointed_link_leads(tmp_path: Path) -> None:
    """The same kind for the sub-agents' sessions beside the parent's: made in the session's
    folder as it was at the run's start (was: in ``elsewhere``, where the re-pointed link led)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sessions, elsewhere = tmp_path / "sessions", tmp_path / "elsewhere"
    sessions.mkdir()
    elsewhere.mkdir()
    (ws / "lnk").symlink_to(sessions)

    def script(messages: list[Message]) -> str:
        if messages[0].content == SUBAGENT_INSTRUCTIONS:
            return answer("child done")
        done = sum(m.role == "tool" for m in messages)
        if done == 0:
            return calls(("bash", {"command": f"rm lnk && ln -s {elsewhere} lnk"}))
        if done == 1:
            return calls(("task", {"description": "d", "prompt": "p"}))
        return answer("done")

    agent = CodingHarness(ws, features=FEATURES - {"background", "checkpoints"}, sandbox="none").agent(
        engine=ScriptedEngine(script))
    result = await agent.run("go", session=ws / "lnk" / "run.jsonl")
    assert result.output == "done"
    assert list(elsewhere.iterdir()) == []
    [child] = [p for p in sessions.iterdir() if p.name.startswith("run.task-")]
    [(_, record)] = SessionLog.read(sessions / "run.jsonl").bodies("child_session")
    assert record["path"] == str(child)


def test_a_dense_index_over_the_limit_is_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """seed_index's other limit: an index with every block on disk but over MAX_COPY_BYTES."""
    monkeypatch.setattr("kimik3.harness._store.MAX_COPY_BYTES", 1000)
    index = tmp_path / "index"
    index.write_bytes(b"DIRC" + b"\1" * 2000)
    with pytest.warns(RuntimeWarning, match=r"the git index .*index is too large \(2004 bytes\); not copied"):
        seed_index(index, tmp_path / "seed")
    assert not (tmp_path / "seed").exists()
    index.write_bytes(b"DIRC" + b"\1" * 900)  # control: within the limit it is copied, byte for byte
    seed_index(index, tmp_path / "seed")
    assert (tmp_path / "seed").read_bytes() == index.read_bytes()
