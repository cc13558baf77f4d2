"""Checkpoints and undo on real git repositories (and a plain directory), with scripted runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import CheckpointError
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints, undo

from .helpers import answer, calls, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

NOTES = b"untracked notes\n\xff\xfe raw bytes\n"


def script() -> list[str]:
    return [
        # turn 1: create x.txt (untracked), read the files turn 2 edits
        calls(("write_file", {"path": "x.txt", "content": "one\n"}), ("read_file", {"path": "a.txt"}),
              ("read_file", {"path": "notes.txt"})),
        # turn 2: edit a tracked CRLF file and an untracked file, rewrite x.txt
        calls(("edit_file", {"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
              ("edit_file", {"path": "notes.txt", "old_string": "untracked", "new_string": "edited"}),
              ("write_file", {"path": "x.txt", "content": "two\n"})),
        # turn 3: bash makes a new directory and file and removes x.txt
        calls(("bash", {"command": "mkdir -p new/deep && printf 'b\\000' > new/deep/f.bin && rm x.txt"})),
        answer("done"),
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / "user.txt").write_text("the user's uncommitted change\n")  # not staged
    (repo / "staged.txt").write_text("staged by the user\n")
    git(repo, "add", "staged.txt")  # the user's index holds this
    (repo / "notes.txt").write_bytes(NOTES)  # untracked, the agent edits it
    return repo


async def run_three_turns(repo: Path, session: Path) -> None:
    agent = CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=ScriptedEngine(script()))
    result = await agent.run("work", session=session)
    assert result.stop_reason == "completed"


async def test_undo_to_turn_1_restores_exact_bytes_and_keeps_the_users_changes(repo: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    status_before = git(repo, "status", "--porcelain")
    index_before = git(repo, "ls-files", "-s")
    head_before = git(repo, "rev-parse", "HEAD")
    await run_three_turns(repo, session)
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nBETA\r\n"
    assert (repo / "new/deep/f.bin").read_bytes() == b"b\x00"
    records = session_checkpoints(session)
    assert [(r["turn"], r["changed"]) for r in records] == [
        (1, ["x.txt"]),
        (2, ["a.txt", "notes.txt", "x.txt"]),
        (3, ["new/deep/f.bin", "x.txt"]),
    ]
    restored = undo(session, 1, workspace=repo)
    assert restored == ["a.txt", "new/deep/f.bin", "notes.txt", "x.txt"]
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"
    assert (repo / "notes.txt").read_bytes() == NOTES
    assert (repo / "x.txt").read_bytes() == b"one\n"
    assert not (repo / "new").exists()  # the directories bash made are gone too
    # the user's own state: worktree changes, index, HEAD
    assert (repo / "user.txt").read_text() == "the user's uncommitted change\n"
    assert (repo / "staged.txt").read_text() == "staged by the user\n"
    assert git(repo, "ls-files", "-s") == index_before
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert git(repo, "status", "--porcelain") == status_before + "?? x.txt\n"
    # and all the way back: x.txt never existed
    assert undo(session, 0, workspace=repo) == ["x.txt"]
    assert not (repo / "x.txt").exists()
    assert git(repo, "status", "--porcelain") == status_before


async def test_side_refs_only_no_branch_or_stash_changes(repo: Path, tmp_path: Path) -> None:
    await run_three_turns(repo, tmp_path / "s.jsonl")
    refs = git(repo, "for-each-ref", "--format=%(refname)").split()
    assert [r for r in refs if not r.startswith("refs/kimik3/")] == ["refs/heads/main"]
    assert len([r for r in refs if r.startswith("refs/kimik3/")]) == 3  # one per changing turn
    assert git(repo, "stash", "list") == ""


async def test_undo_refuses_a_file_changed_after_the_run_unless_forced(repo: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await run_three_turns(repo, session)
    (repo / "a.txt").write_bytes(b"the user edited after the run\n")
    with pytest.raises(CheckpointError, match=r"a\.txt"):
        undo(session, 1, workspace=repo)
    assert (repo / "x.txt").exists() is False  # nothing was restored
    assert (repo / "a.txt").read_bytes() == b"the user edited after the run\n"
    undo(session, 1, force=True, workspace=repo)
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"


async def test_workspace_in_a_subdirectory_of_the_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = repo / "a.txt"
    ws = repo / "sub"
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("read_file", {"path": "keep.txt"})),
                             calls(("edit_file", {"path": "keep.txt", "old_string": "keep", "new_string": "KEPT"})),
                             calls(("bash", {"command": "echo hi > ../a.txt"})), answer("ok")])
    # unsandboxed, so that bash can write outside at all (the sandbox would refuse it)
    await CodingHarness(ws, features=FEATURES - {"background", "subagents"}, sandbox="none").agent(engine=engine).run(
        "go", session=session)
    assert [r["changed"] for r in session_checkpoints(session)] == [["keep.txt"]]  # ../a.txt is outside
    assert undo(session, 0, workspace=ws) == ["keep.txt"]
    assert (ws / "keep.txt").read_text() == "keep\n"
    assert outside.read_text() == "hi\n"  # outside the workspace: not the agent's to undo


async def test_plain_directory_copies_the_touched_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_bytes(b"v0\r\n")
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([
        calls(("read_file", {"path": "f.txt"})),
        calls(("edit_file", {"path": "f.txt", "old_string": "v0", "new_string": "v1"})),
        calls(("edit_file", {"path": "f.txt", "old_string": "v1", "new_string": "v2"}),
              ("write_file", {"path": "d/new.txt", "content": "new"})),
        answer("ok")])
    await CodingHarness(ws, features=FEATURES - {"background", "subagents"}).agent(engine=engine).run("go", session=session)
    kinds = [(r["kind"], r["turn"], r["changed"]) for r in session_checkpoints(session)]
    assert kinds == [("copy", 2, ["f.txt"]), ("copy", 3, ["d/new.txt", "f.txt"])]
    assert undo(session, 2, workspace=ws) == ["d/new.txt", "f.txt"]
    assert (ws / "f.txt").read_bytes() == b"v1\r\n"
    assert not (ws / "d").exists()
    assert undo(session, 0, workspace=ws) == ["f.txt"]
    assert (ws / "f.txt").read_bytes() == b"v0\r\n"
    # again: the session's undo records say those changes were taken back (not "no recorded changes")
    with pytest.raises(CheckpointError) as again:
        undo(session, 0, workspace=ws)
    assert str(again.value) == (f"{session}: the changes recorded after turn 0 (turns 2, 3) were already undone "
                                "(the session records an undo to turn 0); nothing to undo")
    with pytest.raises(CheckpointError) as later:
        undo(session, 2, workspace=ws)
    assert str(later.value) == (f"{session}: the changes recorded after turn 2 (turn 3) were already undone "
                                "(the session records an undo to turn 2); nothing to undo")
    with pytest.raises(CheckpointError) as beyond:
        undo(session, 3, workspace=ws)  # nothing was ever recorded after turn 3
    assert str(beyond.value) == f"{session}: no recorded changes after turn 3; nothing to undo"
    assert (ws / "f.txt").read_bytes() == b"v0\r\n"


async def test_no_changes_records_nothing_and_undo_says_so(repo: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("bash", {"command": "true"})), answer("ok")])
    await CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=engine).run("go", session=session)
    lines = [json.loads(line) for line in session.read_text().splitlines()]
    assert not any("checkpoint" in rec for rec in lines)
    with pytest.raises(CheckpointError, match="no recorded changes after turn 0"):
        undo(session, 0, workspace=repo)


async def test_a_resumed_session_goes_on_counting_turns(repo: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    first = ScriptedEngine([calls(("write_file", {"path": "n.txt", "content": "1\n"})), answer("one")])
    await CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=first).run("a", session=session)
    second = ScriptedEngine([calls(("bash", {"command": "echo 2 > n.txt"})), answer("two")])
    await CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=second).resume(session, "b")
    assert [(r["turn"], r["changed"]) for r in session_checkpoints(session)] == [(1, ["n.txt"]), (3, ["n.txt"])]
    assert undo(session, 2, workspace=repo) == ["n.txt"]
    assert (repo / "n.txt").read_text() == "1\n"


async def test_gitattributes_eol_crlf_and_user_autocrlf_restore_the_same_bytes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "config", "core.autocrlf", "true")  # the user's setting must not change our bytes
    (repo / ".gitattributes").write_text("*.crlf text eol=crlf\n")
    (repo / "w.crlf").write_bytes(b"one\r\ntwo\r\n")
    (repo / "raw.txt").write_bytes(b"lf\nand crlf\r\n")
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([
        calls(("bash", {"command": "printf 'changed\\n' > w.crlf && printf 'x' > raw.txt"})), answer("ok")])
    await CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=engine).run("go", session=session)
    assert undo(session, workspace=repo) == ["raw.txt", "w.crlf"]
    assert (repo / "w.crlf").read_bytes() == b"one\r\ntwo\r\n"
    assert (repo / "raw.txt").read_bytes() == b"lf\nand crlf\r\n"


async def test_a_cancelled_turn_still_records_what_it_changed(repo: Path, tmp_path: Path) -> None:
    import functools

    import anyio

    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("bash", {"command": "echo partial > half.txt && sleep 60"})), answer("x")])
    agent = CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=engine)
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(agent.run, "go", session=session))
        with anyio.fail_after(30):
            while not (repo / "half.txt").exists():
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()  # Ctrl-C while the command runs
    assert [(r["turn"], r["changed"]) for r in session_checkpoints(session)] == [(1, ["half.txt"])]
    assert undo(session, workspace=repo) == ["half.txt"]
    assert not (repo / "half.txt").exists()


async def test_ignored_files_the_file_tools_write_are_undone(tmp_path: Path) -> None:
    """.gitignore'd files edited or created by file tools: recorded, restored/removed by undo."""
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text(".env\nbuild/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / ".env").write_bytes(b"SECRET=1\r\n")
    session = tmp_path / "s.jsonl"
    turns = [calls(("read_file", {"path": ".env"})),
             calls(("edit_file", {"path": ".env", "old_string": "SECRET=1", "new_string": "SECRET=2"}),
                   ("write_file", {"path": "build/out.txt", "content": "made\n"})),
             answer("done")]
    agent = CodingHarness(repo, features=FEATURES - {"background", "subagents"}).agent(engine=ScriptedEngine(turns))
    assert (await agent.run("work", session=session)).stop_reason == "completed"
    assert (repo / ".env").read_bytes() == b"SECRET=2\r\n"
    assert [r["changed"] for r in session_checkpoints(session)] == [[".env", "build/out.txt"]]
    (repo / ".env").write_bytes(b"SECRET=user\n")  # the user's change after the run: undo refuses
    with pytest.raises(CheckpointError, match=r"changed after the agent's last turn .*: \.env$"):
        undo(session, workspace=repo)
    (repo / ".env").write_bytes(b"SECRET=2\r\n")
    assert undo(session, workspace=repo) == [".env", "build/out.txt"]
    assert (repo / ".env").read_bytes() == b"SECRET=1\r\n"
    assert not (repo / "build").exists()
    assert git(repo, "status", "--porcelain", "--ignored") == "!! .env\n"


@pytest.mark.parametrize("where", ["bare repo.git", "repo/.git"])
async def test_a_workspace_that_is_a_git_directory_is_not_written(tmp_path: Path, where: str) -> None:
    """A bare repository (or a .git folder) as the workspace: everything in it is git control data
    (issue 40), so the file tools refuse every write there and nothing is recorded or changed."""
    if where.startswith("bare"):
        git(tmp_path, "init", "-q", "--bare", where)
    else:
        make_repo(tmp_path / "repo")
    root = tmp_path / where
    (root / "description").write_text("before\n")
    session = tmp_path / "s.jsonl"
    turns = [calls(("read_file", {"path": "description"})),
             calls(("edit_file", {"path": "description", "old_string": "before", "new_string": "after"}),
                   ("write_file", {"path": "new file.txt", "content": "x\n"})),
             answer("done")]
    agent = CodingHarness(root, features=FEATURES - {"background", "subagents"}).agent(engine=ScriptedEngine(turns))
    assert (await agent.run("work", session=session)).stop_reason == "completed"
    text = session.read_text()
    results = "".join(line for line in text.splitlines() if line.startswith('{"message"'))  # not run_end's issues
    assert results.count("is in the workspace, which lies in git control data; kimik3 or git act on it after this "
                         "run") == 2
    assert '1\\tbefore' in text  # read_file still reads
    assert session_checkpoints(session) == []
    assert (root / "description").read_text() == "before\n" and not (root / "new file.txt").exists()
