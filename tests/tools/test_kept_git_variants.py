"""Issue 40, point 1, more variants of the kind "the file tools write git control data": git files
no earlier test names, a linked worktree's and a submodule's git data, a repository reached through
a symlinked folder, a last component that is a symlink into ``.git``, a hard link to ``.git/config``,
``apply_patch`` renaming into and out of ``.git`` and deleting through a symlink, and a git directory
a ``commondir`` file written by the tool would make. Each refusal is checked on disk, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kimik3.tools.coding._kept import kept_paths

from ..harness.helpers import git, make_repo
from ..procs import needs_bwrap
from .test_kept_git import GIT_DATA, IN_GIT_DIR, MAKES_GIT_DIR, call, files_of, fsmonitor, tools, user_git_status


async def test_other_git_files_and_routes_are_refused(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    git(ws, "worktree", "add", "-q", "wt2")  # wt2/.git is a file naming .git/worktrees/wt2
    (ws / "real").mkdir()
    make_repo(ws / "real" / "r")
    (ws / "lnk").symlink_to("real")  # a nested repository under a symlinked folder
    (ws / "hl").symlink_to(".git/HEAD")  # a last component leading into .git
    (ws / "gd").symlink_to("real/r/.git")
    os.link(ws / ".git" / "config", ws / "cfg-link")  # the same file as .git/config
    (ws / "half").mkdir()
    (ws / "half" / "HEAD").write_text("ref: refs/heads/main\n")  # one entry short of a git directory
    ref = (ws / ".git" / "refs" / "heads" / "main").read_text().strip()
    t = tools(ws)
    attempts = [
        ("write_file", {"path": ".git/info/attributes", "content": "* filter=x\n"}, GIT_DATA),
        ("write_file", {"path": ".git/modules/x/config", "content": "[core]\n"}, GIT_DATA),
        ("write_file", {"path": ".git/worktrees/wt2/HEAD", "content": "x\n"}, GIT_DATA),
        ("write_file", {"path": "wt2/.git", "content": "gitdir: ../real/r/.git\n"}, GIT_DATA),
        ("write_file", {"path": "lnk/r/.git/config", "content": "[core]\n"}, GIT_DATA),
        ("write_file", {"path": f"{ws}/lnk/r/.git/hooks/pre-commit", "content": "x"}, GIT_DATA),
        ("multi_edit", {"path": "gd/config", "edits": [{"old_string": "[core]", "new_string": "[x]"}]}, GIT_DATA),
        ("write_file", {"path": "hl", "content": "ref: refs/heads/gone\n"}, GIT_DATA),
        ("edit_file", {"path": "hl", "old_string": "main", "new_string": "gone"}, GIT_DATA),
        ("write_file", {"path": "half/commondir", "content": "../.git\n"}, MAKES_GIT_DIR),
        ("apply_patch", {"patch": "--- a/a.txt\n+++ b/.git/hooks/post-checkout\n@@ -1,2 +1,2 @@\n alpha\r\n"
                                  "-beta\r\n+touch PWNED\r\n"}, GIT_DATA),
        ("apply_patch", {"patch": f"--- a/.git/refs/heads/main\n+++ b/main.txt\n@@ -1 +1 @@\n-{ref}\n+x\n"}, GIT_DATA),
        ("apply_patch", {"patch": "--- a/hl\n+++ /dev/null\n@@ -1 +0,0 @@\n-ref: refs/heads/main\n"}, GIT_DATA),
        ("apply_patch", {"patch": "--- a/gd/description\n+++ b/desc.txt\n@@ -1 +1 @@\n-"
                                  + (ws / "real" / "r" / ".git" / "description").read_text().strip() + "\n+x\n"},
         GIT_DATA),
    ]
    before = {d: files_of(ws / d) for d in (".git", "real/r/.git", "half")}
    for name, args, why in attempts:
        out = await call(t, name, args)
        assert out.startswith("Error: ToolError: ") and why in out, (name, args, out)
    assert {d: files_of(ws / d) for d in before} == before
    assert (ws / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"  # the renamed source stays too
    assert not (ws / "main.txt").exists() and not (ws / "desc.txt").exists() and os.path.islink(ws / "hl")
    assert (ws / "wt2" / ".git").read_text() == f"gitdir: {ws / '.git' / 'worktrees' / 'wt2'}\n"
    # a hard link to .git/config is refused as a file of several links (the default)
    out = await call(t, "write_file", {"path": "cfg-link", "content": "[core]\n\tfsmonitor = touch PWNED\n"})
    assert out == ("Error: ToolError: cfg-link has 2 hard links (it may be a file outside the workspace too); not "
                   "written. Use bash to change it if that is intended")
    user_git_status(ws)
    assert not (ws / "PWNED").exists() and git(ws, "rev-parse", "--abbrev-ref", "HEAD") == "main\n"
    # control: the same tools write the work trees beside the git data
    assert await call(t, "write_file", {"path": "lnk/r/new.txt", "content": "ok\n"}) == \
        "Wrote 3 bytes to real/r/new.txt"
    assert await call(t, "write_file", {"path": "half/notes", "content": "ok\n"}) == "Wrote 3 bytes to half/notes"


async def test_a_repository_made_mid_run_with_its_git_directory_elsewhere_is_refused(tmp_path: Path) -> None:
    """The tools exist before the repository: ``git init --separate-git-dir`` during the run puts
    the git directory under an ordinary name, and a ``git worktree add`` there another one."""
    ws = tmp_path / "ws"
    ws.mkdir()
    t = tools(ws)
    git(ws, "init", "-q", "-b", "main", "--separate-git-dir", str(ws / "store"), "proj")
    (ws / "proj" / "f.txt").write_text("f\n")
    git(ws / "proj", "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-qm", "x", "--allow-empty")
    before = files_of(ws / "store")
    for path in ("store/config", "store/hooks/pre-commit", "store/refs/heads/main", "store/HEAD"):
        out = await call(t, "write_file", {"path": path, "content": "x\n"})
        assert out == f"Error: ToolError: {path} {IN_GIT_DIR}", out
    out = await call(t, "apply_patch", {"patch": "--- a/store/HEAD\n+++ /dev/null\n@@ -1 +0,0 @@\n"
                                                 "-ref: refs/heads/main\n"})
    assert IN_GIT_DIR in out
    assert files_of(ws / "store") == before
    assert git(ws / "proj", "rev-parse", "--abbrev-ref", "HEAD") == "main\n"


def unlistable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``folder`` cannot be listed (as ``chmod 000`` makes it for a user who is not root)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and os.fspath(path) == str(folder):
            raise PermissionError(13, "Permission denied", str(folder))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_the_walk_cannot_list_is_kept_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    make_repo(ws / "locked" / "r")  # a chmod 000 folder of the user's: a command may chmod it back
    (ws / "open").mkdir()
    unlistable(monkeypatch, ws / "locked")
    kept = kept_paths(str(ws))
    assert kept.paths == [str(ws / "locked")]
    assert kept.notes == ["1 folders of the workspace could not be looked through for nested repositories; they "
                          "are read-only for commands: locked"]


@needs_bwrap
async def test_bash_cannot_rewrite_a_repository_in_a_folder_the_walk_could_not_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_kept_sandbox import RO, bash_turn

    ws = tmp_path / "ws"
    make_repo(ws / "locked" / "r")
    unlistable(monkeypatch, ws / "locked")
    witness = tmp_path / "PWNED"
    with pytest.warns(RuntimeWarning, match="1 folders of the workspace could not be looked through"):
        [out] = await bash_turn(ws, [f"printf '{fsmonitor(witness)}' > locked/r/.git/config; echo rc=$?; "
                                     "echo ok > top.txt"])
    assert "rc=1" in out and RO in out, out
    assert "fsmonitor" not in (ws / "locked" / "r" / ".git" / "config").read_text()
    user_git_status(ws / "locked" / "r")
    assert not witness.exists() and (ws / "top.txt").read_text() == "ok\n"
