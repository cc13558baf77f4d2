"""Git directories not named ``.git`` (a bare repository, a folder made one with
``core.worktree``, ``objects``/``refs`` that are executable files) and repositories a command
replaces (a submodule's folder moved away): kept from bash, refused by the file tools, or named
at the run's end (issue 40, the attacker's F2, F3, F8), with real git and bwrap."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kimik3.tools.coding._git_config import config_named
from kimik3.tools.coding._kept import kept_paths

from ..harness.helpers import git, make_repo
from ..procs import needs_bwrap
from .test_kept_git import IN_GIT_DIR, call, fsmonitor, tools, user_git_status
from .test_kept_sandbox import RO, bash_turn

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="needs git")


def hook(witness: Path) -> str:
    return f"#!/bin/sh\ntouch {witness}\n"


def worktree_git_dir(folder: Path, witness: Path) -> None:
    """Make ``folder`` a git directory (a bare one's layout) whose work tree is its parent and
    whose ``core.fsmonitor`` touches ``witness``."""
    git(folder.parent, "init", "-q", "--bare", folder.name)
    with (folder / "config").open("a") as f:
        f.write(f'[core]\n\tworktree = ..\n\tfsmonitor = "touch {witness}; false"\n')
    subprocess.run(["git", "config", "-f", str(folder / "config"), "core.bare", "false"], check=True)


@needs_bwrap
@pytest.mark.parametrize("name", ["origin.git", "src"])
async def test_a_git_directory_not_named_git_is_read_only_for_bash(tmp_path: Path, name: str) -> None:
    """The attacker's t4 (a bare ``origin.git`` the user pushes to) and a variant (``src/`` a git
    directory whose work tree is the workspace): a hook or config written by bash would run at
    the user's ``git push`` / ``git status``; the walk finds them by git's own test."""
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    if name == "origin.git":
        git(ws, "init", "-q", "--bare", name)
        git(ws, "remote", "add", "origin", str(ws / name))
        git(ws, "push", "-q", "origin", "main")
        target, text = f"{name}/hooks/pre-receive", hook(witness)
    else:
        worktree_git_dir(ws / name, tmp_path / "unused")
        target, text = f"{name}/config", fsmonitor(witness) + "\tworktree = ..\n"
    assert str(ws / name) in kept_paths(str(ws)).paths
    plant = f"printf '%s' '{text}' > {target}; echo w=$?; chmod +x {target}; touch {name}/x; echo t=$?"
    [out] = await bash_turn(ws, [plant])
    assert "w=1" in out and "t=1" in out and RO in out, out
    assert not (ws / name / "x").exists()
    (ws / "a.txt").write_text("beta\n")
    git(ws, "commit", "-qam", "b")
    act = ["git", "push", "-q", "origin", "main"] if name == "origin.git" else ["git", "status", "--short"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(act, cwd=ws if name == "origin.git" else ws / name, env=env, capture_output=True, check=False)
    assert not witness.exists()
    # the live control: the same plant written from outside runs at the same git command
    (ws / target).write_text(text)
    (ws / target).chmod(0o755)
    (ws / "a.txt").write_text("gamma\n")
    git(ws, "commit", "-qam", "c")
    subprocess.run(act, cwd=ws if name == "origin.git" else ws / name, env=env, capture_output=True, check=False)
    assert witness.exists()


@needs_bwrap
async def test_a_git_directory_a_command_makes_under_another_name_is_named_at_the_end(tmp_path: Path) -> None:
    """The second half of t4: ``src/`` made a git directory during the run (no mount can keep
    what does not exist yet): the run's end names it."""
    ws = make_repo(tmp_path / "ws")
    plant = ("mkdir -p src && git init -q --bare src/x && mv src/x/* src/ && rmdir src/x && "
             "git config -f src/config core.bare false && git config -f src/config core.worktree .. && "
             "git config -f src/config core.fsmonitor 'touch PWNED; false'; echo rc=$?")
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [plant])
    assert "rc=0" in out, out
    assert [str(w.message) for w in caught if "git directory src" in str(w.message)] == [
        "kimik3: a command made the git directory src during the run and it names programs (core.fsmonitor); git "
        "run inside it (or a git status of a repository holding it as a submodule) runs them: look before you do"]


@needs_bwrap
@pytest.mark.parametrize("where", ["sm", "libs/sm"])
async def test_a_checked_out_submodule_folder_cannot_be_replaced(tmp_path: Path, where: str) -> None:
    """The attacker's t3: an initialised submodule's folder moved away (``mv sm sm.old``; variant:
    its parent ``libs``) and a repository with a ``core.fsmonitor`` made in its place would run at
    the *top* repository's ``git status``. The sandbox makes the folder and those above it mount
    points: the move fails (EBUSY), the files inside stay writable."""
    ws = make_repo(tmp_path / "ws")
    src = make_repo(tmp_path / "src")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(src), where)
    git(ws, "commit", "-qm", "sm")
    witness = tmp_path / "PWNED"
    moved = where.split("/")[0]
    plant = (f"mv {moved} {moved}.old; echo mv=$?; echo edit >> {where}/a.txt; echo e=$?; git init -q x && printf "
             f"'%s' '{fsmonitor(witness)}' > x/.git/config && mv -T x {where}; echo plant=$?")
    [out] = await bash_turn(ws, [plant])
    assert "mv=1" in out and "Device or resource busy" in out and "e=0" in out and "plant=1" in out, out
    assert (ws / where / ".git").is_file() and (ws / where / "a.txt").read_bytes() == b"alpha\r\nbeta\r\nedit\n"
    user_git_status(ws)
    assert not witness.exists()
    # the live control: the same replacement done from outside runs at the top repository's git status
    os.rename(ws / moved, ws / f"{moved}.old")
    (ws / where).parent.mkdir(parents=True, exist_ok=True)
    git(ws / where.rsplit("/", 1)[0] if "/" in where else ws, "init", "-q", where.rsplit("/", 1)[-1])
    (ws / where / ".git" / "config").write_text(fsmonitor(witness))
    user_git_status(ws)
    assert witness.exists()


@needs_bwrap
async def test_a_repository_a_command_replaces_is_named_at_the_end(tmp_path: Path) -> None:
    """A nested repository (no gitlink: not pinned) replaced the same way is named at the run's
    end, naming the danger should it be a submodule elsewhere."""
    ws = make_repo(tmp_path / "ws")
    src = make_repo(tmp_path / "src")
    git(ws, "clone", "-q", str(src), "sm")
    plant = ("mv sm sm.old && git init -q sm && cp sm.old/a.txt sm/ && cd sm && git add a.txt && "
             "git -c user.name=a -c user.email=b commit -qm x; echo rc=$?")
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [plant])
    assert "rc=0" in out, out
    assert [str(w.message) for w in caught if "replaced" in str(w.message)] == [
        "kimik3: a command replaced the repository sm during the run (its .git is not the one found at the start); "
        "git status in the repository that holds it as a submodule enters it and runs what it names, as git run "
        "inside it does: look before you run git in this workspace"]


async def test_executable_files_named_objects_and_refs_make_a_git_directory(tmp_path: Path) -> None:
    """The attacker's t14 (F8): git's test is ``access(X_OK)``, so executable *files* named
    ``objects`` and ``refs`` beside a ``HEAD`` make a git directory: its config is refused to the
    file tools, the walk keeps it; git itself agrees (``rev-parse --git-dir`` there)."""
    ws = make_repo(tmp_path / "ws")
    folder = ws / "tools"
    folder.mkdir()
    (folder / "HEAD").write_text("ref: refs/heads/main\n")
    for name in ("objects", "refs"):
        (folder / name).touch()
        (folder / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    here = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=folder, env=env, capture_output=True, text=True)
    assert here.stdout.strip() == "."  # git takes the folder itself as a git directory
    assert str(folder) in kept_paths(str(ws)).paths
    out = await call(tools(ws), "write_file", {"path": "tools/config", "content": fsmonitor(tmp_path / "PWNED")})
    assert out.startswith("Error: ToolError: ") and IN_GIT_DIR in out, out
    assert not (folder / "config").exists()
    (folder / "objects").chmod(0o644)  # not executable: git's test fails, and so does kimik3's
    (folder / "refs").chmod(0o644)
    assert str(folder) not in kept_paths(str(ws)).paths


@needs_bwrap
@pytest.mark.parametrize("how", ["include", "includeIf"])
async def test_files_a_repository_config_names_are_kept(tmp_path: Path, how: str) -> None:
    """The attacker's t5: ``include.path ../.gitconfig`` (a shared config in the work tree) and
    ``core.hooksPath .githooks`` (husky): a ``core.fsmonitor`` written into the one runs at the
    user's ``git status``, a hook in the other at ``git commit``. Both are kept from the file tools
    and bash. Variant: ``includeIf "gitdir:..."``."""
    ws = make_repo(tmp_path / "ws")
    key = "include.path" if how == "include" else f"includeIf.gitdir:{ws}/.git.path"
    git(ws, "config", key, "../.gitconfig")
    git(ws, "config", "core.hooksPath", ".githooks")
    (ws / ".gitconfig").write_text("[user]\n\tname = T\n")
    (ws / ".githooks").mkdir()
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "shared")
    assert config_named(str(ws)) == [str(ws / ".gitconfig"), str(ws / ".githooks")]
    w_status, w_commit = tmp_path / "PWNED_status", tmp_path / "PWNED_commit"
    files = [("write_file", {"path": ".gitconfig", "content": fsmonitor(w_status)}),
             ("write_file", {"path": ".githooks/pre-commit", "content": hook(w_commit)})]
    cmd = (f"printf '%s' '{fsmonitor(w_status)}' > .gitconfig; echo c=$?; printf '%s' '{hook(w_commit)}' > "
           ".githooks/pre-commit; echo h=$?")
    out = await bash_turn(ws, [cmd], files=files)
    assert "c=1" in out[0] and "h=1" in out[0] and RO in out[0], out
    assert all("what a repository's git configuration names" in o for o in out[1:]), out
    assert (ws / ".gitconfig").read_text() == "[user]\n\tname = T\n" and not (ws / ".githooks/pre-commit").exists()
    user_git_status(ws)
    assert not w_status.exists()
    (ws / ".gitconfig").write_text(fsmonitor(w_status))  # the live control: the plant done from outside runs
    user_git_status(ws)
    assert w_status.exists()


@needs_bwrap
async def test_a_repository_made_in_a_missing_submodule_folder_names_the_top_git_status(tmp_path: Path) -> None:
    """The attacker's t16: a gitlink whose folder is missing at the start (no mount can keep it);
    a repository a command makes there runs at the *top* repository's ``git status``, and the
    run's end says exactly that."""
    src = make_repo(tmp_path / "src")
    ws = make_repo(tmp_path / "ws")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(src), "sm")
    git(ws, "commit", "-qm", "sm")
    git(ws, "submodule", "-q", "deinit", "-f", "sm")
    (ws / "sm").rmdir()
    witness = tmp_path / "PWNED"
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [f"git init -q sm && git -C sm config core.fsmonitor 'touch {witness}; false'; "
                                     "echo rc=$?"])
    assert "rc=0" in out, out
    assert [str(w.message) for w in caught if "submodule's folder" in str(w.message)] == [
        "kimik3: a command made the repository sm during the run in a submodule's folder and it names programs "
        "(core.fsmonitor); git status in the repository that holds the submodule runs them: look before you run git "
        "in this workspace"]
    user_git_status(ws)
    assert witness.exists()  # the danger named is real


@needs_bwrap
async def test_a_global_git_config_in_the_workspace_is_read_only_for_bash(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``-w $HOME`` (t6): ``~/.gitconfig`` and ``~/.config/git/`` are bound read-only."""
    home = make_repo(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (home / ".gitconfig").write_text("[user]\n\tname = T\n")
    (home / ".config" / "git").mkdir(parents=True)
    cmd = ("printf '[core]\\n\\tfsmonitor = x\\n' >> .gitconfig; echo g=$?; echo '* filter=x' > "
           ".config/git/attributes; echo a=$?; echo ok > other.txt; echo o=$?")
    [out] = await bash_turn(home, [cmd], skills=False)
    assert "g=1" in out and "a=1" in out and "o=0" in out and RO in out, out
    assert (home / ".gitconfig").read_text() == "[user]\n\tname = T\n"
    assert not (home / ".config" / "git" / "attributes").exists()
