"""A repository a command makes during the run whose programs are named somewhere other than its
git directory's ``config`` (issue 40, round 4 attacker): ``config.worktree`` under
``extensions.worktreeConfig``, or the ``config`` of the common directory its ``commondir`` names.
Git run inside it reads both; the run's end must name them, as it does a ``core.fsmonitor`` in
``config``. Real git and bwrap."""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pytest

from kimik3.tools.coding import _sandbox
from kimik3.tools.coding._git_config import _config_pairs, config_named, programs_named

from ..harness.helpers import git, make_repo
from ..procs import needs_bwrap
from .test_kept_git import fsmonitor
from .test_kept_gitdirs import hook
from .test_kept_sandbox import RO, bash_turn

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="needs git")

WORKTREE_CONFIG = ("git init -q sub && git -C sub config core.repositoryformatversion 1 && "
                   "git -C sub config extensions.worktreeConfig true && "
                   "git -C sub config --worktree core.fsmonitor 'touch {w}; false'; echo rc=$?")
COMMONDIR = ("git init -q --bare cd && mkdir -p sub/gd && mv cd/HEAD sub/gd/HEAD && echo ../../cd > sub/gd/commondir && "
             "echo 'gitdir: gd' > sub/.git && git config -f cd/config core.bare false && "
             "git config -f cd/config core.fsmonitor 'touch {w}; false'; echo rc=$?")


@needs_bwrap
@pytest.mark.parametrize("plant", [WORKTREE_CONFIG, COMMONDIR], ids=["config.worktree", "commondir"])
async def test_a_made_repository_naming_programs_outside_its_config_is_named_at_the_end(tmp_path: Path,
                                                                                        plant: str) -> None:
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [plant.format(w=witness)])
    assert "rc=0" in out, out
    named = [str(w.message) for w in caught if "names programs" in str(w.message)]
    assert ("kimik3: a command made the repository sub during the run and it names programs (core.fsmonitor); git run "
            "inside it (or a git status of a repository holding it as a submodule) runs them: look before you do"
            in named), named
    # the danger named is real: git status inside it runs the program
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=ws / "sub", env=env, capture_output=True, check=False)
    assert witness.exists()


def hooks_path_workspace(tmp_path: Path, how: str) -> Path:
    """A workspace whose ``core.hooksPath .githooks`` (husky) is set where a plain reading of
    ``<git dir>/config`` does not see it: in ``config.worktree`` (``extensions.worktreeConfig``),
    or in the main repository's config of a linked worktree (``git worktree add``: the workspace's
    git directory ``.git/worktrees/ws`` has no ``config``; git reads its ``commondir``'s), or in
    the config of the repository the workspace lies in (husky's monorepo set-up: the workspace
    ``repo/ws`` and ``core.hooksPath ws/.githooks`` in ``repo``)."""
    if how == "enclosing repository":
        repo = make_repo(tmp_path / "repo")
        git(repo, "config", "core.hooksPath", "ws/.githooks")
        (repo / "ws" / ".githooks").mkdir(parents=True)
        return repo / "ws"
    if how == "linked worktree":
        main = make_repo(tmp_path / "main")
        git(main, "config", "core.hooksPath", ".githooks")
        (main / ".githooks").mkdir()
        (main / ".githooks" / "README").write_text("hooks\n")
        git(main, "add", "-A")
        git(main, "commit", "-qm", "hooks")
        git(main, "worktree", "add", "-q", str(tmp_path / "ws"))
        return tmp_path / "ws"
    ws = make_repo(tmp_path / "ws")
    git(ws, "config", "core.repositoryformatversion", "1")
    git(ws, "config", "extensions.worktreeConfig", "true")
    git(ws, "config", "--worktree", "core.hooksPath", ".githooks")
    (ws / ".githooks").mkdir()
    return ws


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "landlock"])
@pytest.mark.parametrize("how", ["config.worktree", "linked worktree", "enclosing repository"])
async def test_a_hooks_path_set_outside_the_git_dirs_config_is_kept(tmp_path: Path, how: str, sandbox: str) -> None:
    """A hook written into the folder would run at the user's next ``git commit``: refused to the
    file tools, read-only for bash (bubblewrap) or put back after the command (Landlock)."""
    if sandbox == "landlock" and _sandbox._landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    ws = hooks_path_workspace(tmp_path, how)
    assert config_named(str(ws)) == [str(ws / ".githooks")]
    witness = tmp_path / "PWNED"
    cmd = f"printf '%s' '{hook(witness)}' > .githooks/pre-commit; echo h=$?; chmod +x .githooks/pre-commit"
    files = [("write_file", {"path": ".githooks/post-commit", "content": hook(witness)})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # Landlock's "put it back"
        out = await bash_turn(ws, [cmd], files=files, sandbox=sandbox)
    if sandbox == "bwrap":
        assert "h=1" in out[0] and RO in out[0], out
    else:
        assert "[the command changed what kimik3 keeps read-only (.githooks/pre-commit); kimik3 put it back" in out[0]
    assert "what a repository's git configuration names" in out[1], out
    assert sorted(p.name for p in (ws / ".githooks").iterdir()) == (["README"] if how == "linked worktree" else [])


@needs_bwrap
@pytest.mark.parametrize("workspace", ["home", "work"])
async def test_files_the_global_git_config_names_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         workspace: str) -> None:
    """``-w $HOME`` with the dotfiles pattern ``[include] path = ~/.gitconfig.local`` and a global
    ``core.hooksPath = ~/.githooks`` in ``~/.gitconfig``: a ``core.fsmonitor`` written into the one
    runs at the user's every ``git status``, a hook in the other at every ``git commit``. Variant:
    ``-w ~/work`` and the work identity ``[includeIf "gitdir:~/work/"] path = ~/work/.gitconfig``
    (the global config itself lies outside the workspace)."""
    home = tmp_path / "home"
    ws = make_repo(home if workspace == "home" else home / "work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    at = "~" if workspace == "home" else "~/work"
    include = "[include]" if workspace == "home" else '[includeIf "gitdir:~/work/"]'
    (home / ".gitconfig").write_text(f"{include}\n\tpath = {at}/.gitconfig.local\n[core]\n\thooksPath = {at}/.githooks\n")
    (ws / ".gitconfig.local").write_text("[user]\n\tname = T\n")
    (ws / ".githooks").mkdir()
    witness = tmp_path / "PWNED"
    cmd = (f"printf '%s' '{fsmonitor(witness)}' > .gitconfig.local; echo c=$?; printf '%s' '{hook(witness)}' > "
           ".githooks/pre-commit; echo h=$?")
    files = [("write_file", {"path": ".gitconfig.local", "content": fsmonitor(witness)}),
             ("write_file", {"path": ".githooks/post-commit", "content": hook(witness)})]
    out = await bash_turn(ws, [cmd], files=files, skills=False)
    assert "c=1" in out[0] and "h=1" in out[0] and RO in out[0], out
    assert all("what a repository's git configuration names" in o for o in out[1:]), out
    assert (ws / ".gitconfig.local").read_text() == "[user]\n\tname = T\n"
    assert list((ws / ".githooks").iterdir()) == []


BIG = ("git init -q sub && {{ printf '#'; head -c 1048576 /dev/zero | tr '\\0' x; "
       "printf '\\n[core]\\n\\tfsmonitor = \"touch {w}; false\"\\n'; }} >> sub/.git/config; echo rc=$?")
LINKED = ("git init -q sub && git config -f cfg.txt core.fsmonitor 'touch {w}; false' && "
          "git config -f cfg.txt core.repositoryformatversion 0 && ln -sf ../../cfg.txt sub/.git/config; echo rc=$?")


@needs_bwrap
@pytest.mark.parametrize(("plant", "why"), [(BIG, "over 1 MiB"), (LINKED, "a symlink")], ids=["big", "symlink"])
async def test_a_made_repository_whose_config_is_not_read_whole_is_named(tmp_path: Path, plant: str, why: str) -> None:
    """A config over the 1 MiB read (its ``core.fsmonitor`` at the end) or a symlink to a file of
    the model's (git follows it): what it names is not known, so the config itself is named."""
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [plant.format(w=witness)])
    assert "rc=0" in out, out
    named = [str(w.message) for w in caught if "names programs" in str(w.message)]
    assert named == [f"kimik3: a command made the repository sub during the run and it names programs (config: {why}, "
                     "not read); git run inside it (or a git status of a repository holding it as a submodule) runs "
                     "them: look before you do"], [str(w.message) for w in caught]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=ws / "sub", env=env, capture_output=True, check=False)
    assert witness.exists()  # the danger named is real


@needs_bwrap
@pytest.mark.parametrize("what", ["hooks", "config", "hook file"])
async def test_where_a_symlink_in_the_git_directory_leads_is_kept(tmp_path: Path, what: str) -> None:
    """The pre-``core.hooksPath`` habit ``.git/hooks -> ../githooks`` (variants: ``.git/config ->
    ../repo-config``, ``.git/hooks/pre-commit -> ../../pre-commit.sh``): git follows the link, so a hook or a ``core.fsmonitor`` written at its
    target runs at the user's next ``git commit`` / ``git status``."""
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    target = ws / {"hooks": "githooks", "config": "repo-config", "hook file": "pre-commit.sh"}[what]
    if what == "hook file":
        target.write_text("#!/bin/sh\nexit 0\n")
        cmd, files = (f"printf '%s' '{hook(witness)}' > pre-commit.sh; echo c=$?",
                      [("edit_file", {"path": "pre-commit.sh", "old_string": "exit 0", "new_string": f"touch {witness}"})])
    elif what == "hooks":
        target.mkdir()
        for sample in (ws / ".git" / "hooks").iterdir():
            sample.unlink()
        (ws / ".git" / "hooks").rmdir()
        cmd, files = (f"printf '%s' '{hook(witness)}' > githooks/pre-commit; echo c=$?",
                      [("write_file", {"path": "githooks/post-commit", "content": hook(witness)})])
    else:
        target.write_text((ws / ".git" / "config").read_text())
        (ws / ".git" / "config").unlink()
        cmd, files = (f"printf '%s' '{fsmonitor(witness)}' >> repo-config; echo c=$?",
                      [("write_file", {"path": "repo-config", "content": fsmonitor(witness)})])
    link = ws / ".git" / ("hooks/pre-commit" if what == "hook file" else what)
    link.symlink_to(f"{'../' * (len(link.relative_to(ws).parts) - 1)}{target.name}")
    before = {p.name: p.read_bytes() for p in target.iterdir()} if target.is_dir() else target.read_bytes()
    assert config_named(str(ws)) == [str(target)]
    out = await bash_turn(ws, [cmd], files=files)
    assert "c=1" in out[0] and RO in out[0], out
    assert "what a repository's git configuration names" in out[1], out
    assert before == ({p.name: p.read_bytes() for p in target.iterdir()} if target.is_dir() else target.read_bytes())


def test_a_shell_program_a_config_names_is_kept(tmp_path: Path) -> None:
    """``credential.helper = !./tools/cred.sh`` (a ``!`` shell command): its program is git's to
    run, as ``credential.helper = ./tools/cred.sh`` is."""
    ws = make_repo(tmp_path / "ws")
    git(ws, "config", "credential.helper", "!./tools/cred.sh get")
    git(ws, "config", "core.editor", "./tools/edit.sh")
    assert config_named(str(ws)) == [str(ws / "tools" / "cred.sh"), str(ws / "tools" / "edit.sh")]


@pytest.mark.parametrize(("key", "value"), [
    ("merge.ours.driver", "./tools/merge.sh %O %A %B"), ("mergetool.mine.cmd", "./tools/mt.sh $LOCAL"),
    ("difftool.mine.cmd", "./tools/dt.sh"), ("trailer.sign.cmd", "./tools/sign.sh"), ("pager.log", "./tools/pg.sh"),
    ("alias.st", "!./tools/st.sh"), ("remote.origin.uploadpack", "./tools/up.sh"),
    ("interactive.diffFilter", "./tools/df.sh")])
def test_each_program_setting_names_its_program(tmp_path: Path, key: str, value: str) -> None:
    """Settings whose value git runs beyond a filter's ``clean``: a merge driver (run at ``git
    merge`` of a file whose ``.gitattributes`` says ``merge=ours``), a tool's or trailer's ``cmd``,
    a per-command pager (``git log``), a shell alias, a remote's ``uploadpack``; the program
    each names in the workspace is kept, and a made repository setting one is named."""
    ws = make_repo(tmp_path / "ws")
    git(ws, "config", key, value)
    program = value.split()[0].removeprefix("!").removeprefix("./")
    assert config_named(str(ws)) == [str(ws / program)]
    assert programs_named(str(ws / ".git")) == [key.lower()]


@pytest.mark.parametrize("head", ["\ufeff", "", "\u2028", "\\\n"], ids=["bom", "form feed", "line separator",
                                                                   "continued value"])
def test_a_config_read_as_git_reads_it(tmp_path: Path, head: str) -> None:
    """git skips a UTF-8 BOM at a config's start and breaks lines at ``\\n`` only: a config that
    begins with a BOM, or whose harmless value holds a form feed or U+2028 followed by ``[user]``
    (or ends in a backslash: ``[user]`` on the next line is part of it),
    still sets ``core.fsmonitor`` for git (its ``git status`` runs it), and is named so."""
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "PWNED"
    brk = "\f" if head == "" else head if head in ("\u2028", "\\\n") else ""
    text = f'{head if head == chr(0xFEFF) else ""}[core]\n\trepositoryformatversion = 0\n\tcomment = x{brk}[user]\n' \
           f'\tfsmonitor = "touch {witness}; false"\n'
    (ws / "sub" / ".git").mkdir()
    for name in ("objects", "refs"):
        (ws / "sub" / ".git" / name).mkdir()
    (ws / "sub" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "sub" / ".git" / "config").write_text(text, encoding="utf-8")
    assert programs_named(str(ws / "sub" / ".git")) == ["core.fsmonitor"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=ws / "sub", env=env, capture_output=True, check=False)
    assert witness.exists()  # git reads it so


def test_a_backslash_in_a_comment_continues_nothing() -> None:
    """As git: a backslash at the end of a ``#`` comment joins no line (``[core]`` after it is a
    section), one inside quotes after a ``;`` does (``a;bc``)."""
    text = '[user]\n\tcomment = x #\\\n[core]\n\tfsmonitor = y\n\tname = "a;b\\\nc"\n'
    assert [k for k, _ in _config_pairs(text)] == ["user.comment", "core.fsmonitor", "core.name"]
    assert _config_pairs(text)[2] == ("core.name", "a;bc")


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "landlock"])
async def test_a_hooks_folder_missing_at_the_start_that_a_command_makes_is_named(tmp_path: Path, sandbox: str) -> None:
    """``core.hooksPath .githooks`` before the folder exists (husky before its install): no mount
    can keep what is missing, so a command can make it and plant ``pre-commit``, which the user's
    next ``git commit`` runs; the run's end says so."""
    if sandbox == "landlock" and _sandbox._landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    ws = make_repo(tmp_path / "ws")
    git(ws, "config", "core.hooksPath", ".githooks")
    plant = f"mkdir .githooks && printf '%s' '{hook(tmp_path / 'PWNED')}' > .githooks/pre-commit; echo rc=$?"
    with pytest.warns(RuntimeWarning) as caught:
        [out] = await bash_turn(ws, [plant], sandbox=sandbox)
    assert "rc=0" in out, out
    assert [str(w.message) for w in caught if ".githooks" in str(w.message)] == [
        "kimik3: a command made .githooks during the run, what a repository's git configuration names (git reads or "
        "runs it); it did not exist when the sandbox started, so nothing kept it: look at it before git or a later "
        "run acts on it"]
