"""Issue 40, point 1: checkpoint copies are not the model's to rewrite. They live outside the
workspace (``${KIMIK3_HOME}/checkpoints/...`` when the session lies in it), ``0700``, written and
read with ``O_NOFOLLOW`` from the store's descriptor; each copy's SHA-256 is in the record and undo
refuses a copy that differs; a sparse or huge file is not copied (the record and undo say so); a
sparse index of a model-made repository is not copied either. kimik3's own git (checkpoints and
undo) runs nothing that a repository made during the run, or planted in a gitlink folder, names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3 import ScriptedEngine
from kimik3._exceptions import CheckpointError
from kimik3.cli import main
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints, undo
from kimik3.harness._store import seed_index, store_candidates

from .helpers import answer, calls, git, make_repo

FEATURE_SET = FEATURES - {"background", "subagents", "read_before_edit"}


async def run_turns(ws: Path, session: Path, *turns: str) -> None:
    agent = CodingHarness(ws, features=FEATURE_SET, sandbox="none").agent(engine=ScriptedEngine([*turns,
                                                                                                  answer("done")]))
    assert (await agent.run("work", session=session)).stop_reason == "completed"


def edit(path: str, old: str, new: str) -> str:
    return calls(("edit_file", {"path": path, "old_string": old, "new_string": new}))


def fsmonitor(witness: Path) -> str:
    return f'[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch {witness}; false"\n'


async def test_copies_of_a_session_in_the_workspace_live_outside_it(tmp_path: Path, _own_kimik3_home: Path) -> None:
    """The issue's input: copies beside a session in the workspace were the model's to edit, and a
    symlinked copy folder made kimik3 write outside the workspace."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    session = ws / "run.jsonl"
    (ws / "run.jsonl.checkpoints").symlink_to(outside)  # planted by an earlier turn's bash
    await run_turns(ws, session, edit("a.txt", "before", "after"))
    beside, store = store_candidates(session)
    assert store.parent == _own_kimik3_home / "checkpoints" and store.name.startswith("run.jsonl-")
    assert list(outside.iterdir()) == [] and beside.is_symlink()
    assert (store / "turn-1" / "0.bin").read_text() == "before\n"
    assert oct(store.stat().st_mode & 0o777) == "0o700" and oct((store / "turn-1").stat().st_mode & 0o777) == "0o700"
    [record] = session_checkpoints(session, workspace=ws)
    assert record["dir"] == store / "turn-1" and record["copied"] == {"a.txt": hashlib.sha256(b"before\n").hexdigest()}
    assert undo(session, workspace=ws) == ["a.txt"] and (ws / "a.txt").read_text() == "before\n"


async def test_undo_refuses_a_tampered_copy(tmp_path: Path, _own_kimik3_home: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    session = tmp_path / "run.jsonl"  # outside: the store is beside it
    await run_turns(ws, session, edit("a.txt", "before", "after"))
    copy = tmp_path / "run.jsonl.checkpoints" / "turn-1" / "0.bin"
    assert copy.read_text() == "before\n"
    copy.write_text("rm -rf ~\n")  # the model's text, had it reached the copy
    r = CliRunner().invoke(main, ["undo", str(session), "-w", str(ws)], env={"KIMIK3_HOME": str(_own_kimik3_home)})
    assert r.exit_code == 1 and r.stdout == ""
    assert (f"error: the copy of a.txt ({copy}) is not the one kimik3 stored (its SHA-256 differs from the checkpoint "
            "record's): it was changed after the turn; nothing was changed") in r.output
    assert (ws / "a.txt").read_text() == "after\n"
    # variant: the copy swapped for a symlink to a file with the right bytes elsewhere: never followed
    good = tmp_path / "good.bin"
    good.write_text("before\n")
    copy.unlink()
    copy.symlink_to(good)
    with pytest.raises(CheckpointError, match=r"cannot read the copy of a.txt .*: Too many levels of symbolic links "
                                              r"\(a symlink is never followed\); nothing was changed"):
        undo(session, workspace=ws)
    assert (ws / "a.txt").read_text() == "after\n"


async def test_an_older_record_without_digests_in_the_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "store" / "turn-1").mkdir(parents=True)
    (ws / "store" / "turn-1" / "0.bin").write_text("model text\n")
    (ws / "a.txt").write_text("after\n")
    record = {"turn": 1, "kind": "copy", "root": str(ws), "dir": str(ws / "store" / "turn-1"),
              "files": {"a.txt": "0.bin"}, "after": {"a.txt": hashlib.sha256(b"after\n").hexdigest()},
              "changed": ["a.txt"]}
    session = tmp_path / "old.jsonl"
    session.write_text(json.dumps({"kimik3_session": 1, "created": 1, "id": "0" * 32}) + "\n"
                       + json.dumps({"checkpoint": record}) + "\n")
    with pytest.raises(CheckpointError, match=r"the copy of a.txt lies in the workspace .* and its record has no "
                                              r"digest to check it against"):
        undo(session, workspace=ws, store=ws / "store")
    assert (ws / "a.txt").read_text() == "after\n"


async def test_a_sparse_file_is_not_copied_and_undo_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open(ws / "big.img", "wb") as f:
        f.truncate(3_000_000_000)  # 3 GB of holes
    (ws / "a.txt").write_text("before\n")
    session = tmp_path / "run.jsonl"
    await run_turns(ws, session, calls(("write_file", {"path": "big.img", "content": "x"}),
                                       ("edit_file", {"path": "a.txt", "old_string": "before", "new_string": "after"})))
    store = tmp_path / "run.jsonl.checkpoints"
    on_disk = sum(p.stat().st_blocks * 512 for p in store.rglob("*") if p.is_file())
    assert on_disk <= 8192 and sorted(p.name for p in (store / "turn-1").iterdir()) == ["0.bin"]
    why = "not copied: a sparse file (3000000000 bytes, 0 on disk); undo cannot restore it"
    [record] = session_checkpoints(session, workspace=ws)
    assert record["uncovered"] == {"big.img": why} and record["changed"] == ["a.txt"]
    with pytest.raises(CheckpointError, match=rf"do not cover: big.img \(turn 1: {re.escape(why)}\); undo with partial=True"):
        undo(session, workspace=ws)
    assert undo(session, workspace=ws, partial=True) == ["a.txt"] and (ws / "a.txt").read_text() == "before\n"
    assert (ws / "big.img").read_bytes() == b"x"


def test_a_sparse_index_of_a_nested_repository_is_not_copied(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "inner")
    with open(repo / ".git" / "index", "r+b") as f:
        f.truncate(3_000_000_000)
    with pytest.warns(RuntimeWarning, match=r"the git index .* is sparse \(3000000000 bytes\); not copied"):
        seed_index(repo / ".git" / "index", tmp_path / "seed")
    assert not (tmp_path / "seed").exists()


async def test_checkpoints_with_a_sparse_index_in_a_model_made_repository(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    inner = make_repo(ws / "made")  # as the model's bash would: git init, commit
    with open(inner / ".git" / "index", "r+b") as f:
        f.truncate(3_000_000_000)
    session = tmp_path / "run.jsonl"
    with pytest.warns(RuntimeWarning, match=r"made/.git/index is sparse \(3000000000 bytes\); not copied"):
        await run_turns(ws, session, edit("user.txt", "committed", "changed"))
    assert undo(session, workspace=ws) == ["user.txt"] and (ws / "user.txt").read_text() == "committed\n"


async def test_kimiks_git_runs_nothing_a_planted_repository_names(tmp_path: Path) -> None:
    """A repository planted in an uninitialised submodule's folder and one made during the run,
    each with a core.fsmonitor and hooks: checkpoints and undo run git there isolated."""
    src = make_repo(tmp_path / "src")
    ws = make_repo(tmp_path / "ws")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(src), "sm")
    git(ws, "commit", "-qm", "sm")
    git(ws, "submodule", "-q", "deinit", "-f", "sm")
    witness = tmp_path / "PWNED"
    for where in (ws / "sm", ws / "made"):  # as an unsandboxed bash would have planted them
        make_repo(where)
        (where / ".git" / "config").write_text(fsmonitor(witness))
        hook = where / ".git" / "hooks" / "post-index-change"
        hook.write_text(f"#!/bin/sh\ntouch {witness}\n")
        hook.chmod(0o755)
        (where / "a.txt").write_text("planted\n")
    session = tmp_path / "run.jsonl"
    await run_turns(ws, session, edit("user.txt", "committed", "changed"),
                    calls(("write_file", {"path": "made/a.txt", "content": "x\n"})))
    assert not witness.exists()
    with pytest.raises(CheckpointError, match="do not cover"):
        undo(session, workspace=ws)
    assert undo(session, workspace=ws, partial=True) == ["user.txt"]
    assert not witness.exists()
    # live control: the user's own git status does run the planted submodule's fsmonitor
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=ws, env=env, capture_output=True, timeout=120, check=False)
    assert witness.exists()
