"""Issue 40, point 1: the file tools run in kimik3's own process, outside any sandbox, so they must
never write git control data, of any repository, made before or during the run: a planted
``core.fsmonitor`` runs at the user's next ``git status``; a rewritten ``HEAD`` or a deleted ref
loses the branch. Decided at write time on the walk's own descriptors (no start-time walk that a
deep or new repository escapes). Each attack's bytes on disk and a real ``git status`` are checked;
a live control shows each plant fires where it lands."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kimik3.harness import FEATURES, CodingHarness
from kimik3.tools import Tool
from kimik3.tools.coding._git_index import MAX_GITLINKS, gitlinks
from kimik3.tools.coding._kept import kept_paths

from ..harness.helpers import git, make_repo

REFUSED = "; kimik3 or git act on it after this run, so no tool may write it (the file tools refuse, and bash " \
          "finds it read-only). Change the work tree's files instead"
GIT_DATA = "is git control data (a .git folder or file)" + REFUSED
IN_GIT_DIR = "is inside a git directory (git control data)" + REFUSED
MAKES_GIT_DIR = "is what would make its folder a git directory (git control data)" + REFUSED

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="needs git")


def tools(ws: Path) -> dict[str, Tool]:
    harness = CodingHarness(ws, features=FEATURES - {"read_before_edit", "background", "subagents"},
                            sandbox="none", skills=False)
    return {t.name: t for t in harness.tools}


async def call(t: dict[str, Tool], name: str, args: dict[str, Any]) -> str:
    result = await t[name].run(args)
    assert isinstance(result.content, str)
    return result.content


def fsmonitor(witness: Path) -> str:
    return f'[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch {witness}; false"\n'


def user_git_status(ws: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "status", "--short"], cwd=ws, env=env, capture_output=True, text=True,
                          timeout=120, check=False).stdout


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


async def test_the_issues_inputs_are_refused_and_git_status_runs_nothing(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    before = files_of(ws / ".git")
    ref = (ws / ".git" / "refs" / "heads" / "main").read_text()
    t = tools(ws)
    out = [await call(t, "write_file", {"path": ".git/config", "content": fsmonitor(witness)}),
           await call(t, "write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\ntouch PWNED\n"}),
           await call(t, "edit_file", {"path": ".git/HEAD", "old_string": "main", "new_string": "gone"}),
           await call(t, "apply_patch", {"patch": f"--- a/.git/refs/heads/main\n+++ /dev/null\n@@ -1 +0,0 @@\n"
                                                  f"-{ref.strip()}\n"})]
    assert out == [f"Error: ToolError: .git/config {GIT_DATA}", f"Error: ToolError: .git/hooks/pre-commit {GIT_DATA}",
                   f"Error: ToolError: .git/HEAD {GIT_DATA}",
                   f"Error: ToolError: cannot write .git/refs/heads/main: .git/refs/heads/main {GIT_DATA}; "
                   "nothing was changed"]
    assert files_of(ws / ".git") == before  # byte for byte: no config, hook, HEAD or ref changed
    assert git(ws, "rev-parse", "--abbrev-ref", "HEAD") == "main\n"
    assert user_git_status(ws) == "" and not witness.exists()
    # live control: the same bytes, written from outside, do fire
    (ws / ".git" / "config").write_text(fsmonitor(witness))
    user_git_status(ws)
    assert witness.exists()


async def test_every_way_to_the_git_data_is_refused(tmp_path: Path) -> None:
    """Variants: a symlink to .git, another case, multi_edit, a gitdir named by a .git file, a
    repository made during the run (after the tools were made: no walk saw it), a folder that the
    write would make a bare repository, and a .git file that would name a planted one."""
    ws = make_repo(tmp_path / "ws")
    (ws / "cfg").symlink_to(".git")
    (ws / "meta").mkdir()
    git(ws / "sub", "init", "-q", "--separate-git-dir", str(ws / "meta" / "sub.git"))  # sub/.git is a file
    (ws / "bare" / "objects").mkdir(parents=True)
    (ws / "bare" / "refs").mkdir()
    git(ws, "init", "-q", "--bare", "common")
    (ws / "common" / "HEAD").unlink()  # a common directory a commondir file names: no HEAD of its own
    t = tools(ws)
    git(ws, "init", "-q", "later")  # made after the tools: a repository of the run
    attempts = [
        ("write_file", {"path": "cfg/config", "content": "x"}, GIT_DATA),
        ("write_file", {"path": "a/../.GIT/config", "content": "x"}, GIT_DATA),
        ("multi_edit", {"path": ".git/config", "edits": [{"old_string": "[core]", "new_string": "[x]"}]}, GIT_DATA),
        ("write_file", {"path": "meta/sub.git/config", "content": "x"}, IN_GIT_DIR),
        ("edit_file", {"path": "meta/sub.git/HEAD", "old_string": "ref", "new_string": "x"}, IN_GIT_DIR),
        ("write_file", {"path": "later/.git/hooks/post-checkout", "content": "x"}, GIT_DATA),
        ("write_file", {"path": "bare/HEAD", "content": "ref: refs/heads/main\n"}, MAKES_GIT_DIR),
        ("write_file", {"path": "bare/config", "content": "[core]\n"}, MAKES_GIT_DIR),
        ("edit_file", {"path": "common/config", "old_string": "bare", "new_string": "x"}, IN_GIT_DIR),
        ("write_file", {"path": "common/hooks/pre-commit", "content": "x"}, IN_GIT_DIR),
        ("write_file", {"path": "sub/.git", "content": f"gitdir: {tmp_path}\n"}, GIT_DATA),
        ("write_file", {"path": "new/.git/config", "content": "x"}, GIT_DATA),
        ("apply_patch", {"patch": "--- /dev/null\n+++ b/deep/.git/HEAD\n@@ -0,0 +1 @@\n+x\n"}, GIT_DATA),
    ]
    before = {d: files_of(ws / d) for d in (".git", "meta", "later", "bare", "common")}
    for name, args, why in attempts:
        out = await call(t, name, args)
        assert out.startswith("Error: ToolError: ") and why in out, (name, args, out)
    assert {d: files_of(ws / d) for d in before} == before
    assert not (ws / "new").exists() and not (ws / "deep").exists()  # no folder made on the way
    assert (ws / "sub" / ".git").read_text() == f"gitdir: {ws / 'meta' / 'sub.git'}\n"
    # control: the work tree's own files are written, also next to the git data
    assert await call(t, "write_file", {"path": "bare/notes.txt", "content": "ok\n"}) == "Wrote 3 bytes to bare/notes.txt"
    assert await call(t, "write_file", {"path": "later/x.txt", "content": "ok\n"}) == "Wrote 3 bytes to later/x.txt"
    assert await call(t, "write_file", {"path": ".gitignore", "content": "x\n"}) == "Wrote 2 bytes to .gitignore"
    assert await call(t, "read_file", {"path": ".git/HEAD"}) == "     1\tref: refs/heads/main"  # reads stay


def submodule_workspace(tmp_path: Path) -> Path:
    """A repository with a submodule ``sm`` that is not initialised (its folder empty)."""
    src = make_repo(tmp_path / "src")
    ws = make_repo(tmp_path / "ws")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(src), "sm")
    git(ws, "commit", "-qm", "sm")
    git(ws, "submodule", "-q", "deinit", "-f", "sm")
    assert list((ws / "sm").iterdir()) == []
    return ws


async def test_a_repository_planted_in_a_gitlink_folder_is_refused(tmp_path: Path) -> None:
    ws = submodule_workspace(tmp_path)
    witness = tmp_path / "PWNED"
    t = tools(ws)
    for path, content in (("sm/.git/HEAD", "ref: refs/heads/main\n"), ("sm/.git/config", fsmonitor(witness)),
                          ("sm/.git", "gitdir: ../.git\n")):
        out = await call(t, "write_file", {"path": path, "content": content})
        assert out == f"Error: ToolError: {path} {GIT_DATA}"
    assert list((ws / "sm").iterdir()) == []
    user_git_status(ws)
    assert not witness.exists()
    # live control: the repository planted from outside runs at the top repository's git status
    git(ws / "sm", "init", "-q")
    (ws / "sm" / ".git" / "config").write_text(fsmonitor(witness))
    user_git_status(ws)
    assert witness.exists()


def test_the_sandbox_list_has_the_empty_gitlink_folder(tmp_path: Path) -> None:
    ws = submodule_workspace(tmp_path)
    assert gitlinks(str(ws / ".git")) == ["sm"]
    kept = kept_paths(str(ws))
    assert str(ws / "sm") in kept.paths and str(ws / ".git") in kept.paths and kept.notes == []
    git(ws, "submodule", "-q", "update", "--init")  # populated: its .git file is kept, not the folder
    kept = kept_paths(str(ws))
    assert str(ws / "sm") not in kept.paths and str(ws / "sm" / ".git") in kept.paths


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_gitlinks_are_read_from_each_index_version(tmp_path: Path, version: str) -> None:
    ws = make_repo(tmp_path / "ws")
    for name in ("a/b/deep", "a/b/deeper", "zz"):
        inner = make_repo(tmp_path / "inner" / name)
        git(ws, "update-index", "--add", "--cacheinfo", f"160000,{git(inner, 'rev-parse', 'HEAD').strip()},{name}")
    (ws / "ita.txt").write_text("x\n")
    git(ws, "add", "-N", "ita.txt")  # intent-to-add: an extended flag (version 3)
    git(ws, "update-index", "--index-version", version)
    assert gitlinks(str(ws / ".git")) == ["a/b/deep", "a/b/deeper", "zz"]


def test_gitlinks_of_a_sha256_repository(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    if subprocess.run(["git", "init", "-q", "--object-format=sha256", str(ws)], capture_output=True).returncode:
        pytest.skip("this git has no SHA-256 repositories")
    inner = make_repo(tmp_path / "inner")
    sha = "ab" * 32
    git(ws, "update-index", "--add", "--cacheinfo", f"160000,{sha},lib")
    assert gitlinks(str(ws / ".git")) == ["lib"] and inner.exists()


def test_an_index_that_cannot_be_read_is_said(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    with open(ws / ".git" / "index", "r+b") as f:
        f.truncate(3_000_000_000)  # a sparse 3 GB index: never read
    assert gitlinks(str(ws / ".git")) == "its index is sparse (3000000000 bytes); not read"
    kept = kept_paths(str(ws))
    assert kept.notes == ["the gitlinks of . are not known (its index is sparse (3000000000 bytes); not read); a "
                          "repository made in a submodule's empty folder there is not kept from commands"]


def test_a_walk_that_stops_early_keeps_what_it_did_not_see(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    for i in range(30):
        (ws / f"d{i:02}" / "inner").mkdir(parents=True)
    make_repo(ws / "d29" / "inner" / "deep")
    deep = str(ws / "d29" / "inner" / "deep" / ".git")
    full = kept_paths(str(ws))
    assert full.notes == [] and full.paths == [deep]
    for limit in (2, 5, 40):
        cut = kept_paths(str(ws), max_dirs=limit)
        unwalked = [p for p in cut.paths if not p.endswith("/.git")]
        assert cut.notes == [f"the workspace has more than {limit} folders; the {len(unwalked)} folders not looked "
                             "through for nested repositories are read-only for commands: "
                             + ", ".join(os.path.relpath(p, ws) for p in unwalked[:5]) + ", ..."]
        assert any(deep == p or deep.startswith(p + "/") for p in cut.paths)  # the deep repository is covered
        assert str(ws) not in cut.paths
    # past the mount bound the unwalked folders' parents are kept instead (more, never less; never the root)
    monkeypatch.setattr("kimik3.tools.coding._kept._MAX_UNWALKED", 3)
    cut = kept_paths(str(ws), max_dirs=2)
    assert sorted(cut.paths) == [str(ws / f"d{i:02}") for i in range(30)]
    assert kept_paths(str(ws), max_dirs=1).notes == []  # an allowed folder's own repository only


@pytest.mark.parametrize("where", [".git/hooks", ".git", "bare.git/hooks"])
async def test_a_workspace_inside_git_control_data_is_not_written(tmp_path: Path, where: str) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "init", "-q", "--bare", "bare.git")
    ws = repo / where
    ws.mkdir(exist_ok=True)
    before = files_of(repo / ".git")
    out = await call(tools(ws), "write_file", {"path": "pre-commit", "content": "#!/bin/sh\ntouch PWNED\n"})
    assert out == f"Error: ToolError: pre-commit is in the workspace, which lies in git control data{REFUSED}"
    assert files_of(repo / ".git") == before and not (ws / "pre-commit").exists()


def crafted_index(entries: int, mode: int, first: bytes) -> bytes:
    """A version 4 index whose first entry's name is ``first`` and each later one repeats it
    (prefix-compressed: strip 0 bytes, add none), every entry of ``mode``."""
    out = [b"DIRC", struct.pack(">II", 4, entries)]
    for i in range(entries):
        name = first if i == 0 else b""
        out.append(b"\0" * 24 + struct.pack(">I", mode) + b"\0" * 12 + b"\1" * 20 + struct.pack(">H", 0)
                   + b"\0" + name + b"\0")
    return b"".join(out) + b"\2" * 20


def test_a_crafted_index_costs_its_size_and_is_bounded(tmp_path: Path) -> None:
    """A model-made repository's index is the model's: 200,000 entries repeating a 4,000-byte
    name (800 MB of names if each were copied) parse in one pass; more gitlinks than
    MAX_GITLINKS are said, not listed; a name past 4096 bytes is no index."""
    gitdir = tmp_path / "g"
    gitdir.mkdir()
    (gitdir / "index").write_bytes(crafted_index(200_000, 0o100644, b"a" * 4000))
    assert gitlinks(str(gitdir)) == []
    (gitdir / "index").write_bytes(crafted_index(MAX_GITLINKS + 1, 0o160000, b"sub"))
    assert gitlinks(str(gitdir)) == f"its index has over {MAX_GITLINKS} gitlinks"
    (gitdir / "index").write_bytes(crafted_index(1, 0o160000, b"a" * 5000))
    assert gitlinks(str(gitdir)) == "its index could not be parsed"
    (gitdir / "index").write_bytes(crafted_index(3, 0o160000, b"lib/x"))
    assert gitlinks(str(gitdir)) == ["lib/x"] * 3
