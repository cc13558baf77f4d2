"""Git checkpoints leave out sparse and huge files (the copy kind's limits) instead of hashing
them, and say so (issue 40, the attacker's F6), with real git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints

from .helpers import answer, calls, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.mark.parametrize("kind", ["untracked", "tracked"])
async def test_a_sparse_file_is_not_hashed_and_is_said_uncovered(tmp_path: Path, kind: str) -> None:
    """The attacker's t9 (``truncate -s 1G big.bin`` by bash: git would read the whole gigabyte at
    each checkpoint, 8 GiB files end the run) and a variant: a tracked file made sparse."""
    repo = make_repo(tmp_path / "repo")
    name = "big.bin" if kind == "untracked" else "user.txt"
    session = tmp_path / "s.jsonl"
    agent = CodingHarness(repo, features=FEATURES - {"background", "subagents"}, sandbox="none").agent(
        engine=ScriptedEngine([calls(("bash", {"command": f"truncate -s 1G {name}"}),
                                     ("write_file", {"path": "new.txt", "content": "x\n"})), answer("done")]))
    assert (await agent.run("go", session=session)).stop_reason == "completed"
    assert os.stat(repo / name).st_size == 1 << 30
    [record] = session_checkpoints(session)
    assert (record["kind"], record["changed"]) == ("git", ["new.txt"])
    assert record["uncovered"] == {name: f"not in the checkpoint: a sparse file ({1 << 30} bytes, "
                                         f"{os.stat(repo / name).st_blocks * 512} on disk); undo cannot restore it"}
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", record["after"]], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.split()
    assert "new.txt" in listed and (name not in listed if kind == "untracked" else name in listed)
    if kind == "tracked":  # the tree holds the committed bytes, not the gigabyte
        blob = subprocess.run(["git", "cat-file", "-s", f"{record['after']}:{name}"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.strip()
        assert blob == str(len("committed\n"))
