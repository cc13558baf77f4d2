"""kimik3's own git runs nothing a workspace repository's configuration names: a program planted
in a repository's config, hooks or attributes (a filter driver, a hook, fsmonitor, a signing
program, a diff driver, a pager, a promisor remote's upload-pack) never runs when checkpoints
snapshot a turn or undo restores one, in the workspace's repository and in one the model made in
a subfolder with ``git init`` (where the sandbox cannot protect ``.git/config``): outside the
sandbox it would be an escape from it.

Each planted program appends to a marker file outside the workspace. A control runs plain git on
the same repository the way the planted kind fires, and asserts that the marker then appears: the
plant is live, so its absence after the run and the undo means kimik3 did not run it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import CheckpointError
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints, undo

from ..procs import needs_bwrap
from .helpers import answer, calls, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@dataclass(frozen=True)
class Kind:
    """One way a repository's configuration names a program.

    ``plant`` is a shell script run with ``$R`` the repository, ``$MARK`` a program that appends
    to the marker, ``$FILTER`` one that also copies stdin to stdout (a clean / smudge filter);
    ``control`` is the plain git command (run in ``$R``) that fires it.
    """

    plant: str
    control: str


CFG = 'git config --file "$R/.git/config"'
ATTRS = 'mkdir -p "$R/.git/info" && printf "*.txt filter=k diff=k\\n" > "$R/.git/info/attributes"'
HOOKS = ('for h in post-index-change reference-transaction pre-auto-gc post-checkout; do cp "$MARK" "$1/$h"; done')
ADD = "GIT_INDEX_FILE=$PWD/.git/control-index git add -A"

KINDS = {
    "filter.clean": Kind(f'{CFG} filter.k.clean "$FILTER" && {ATTRS}', ADD),
    "filter.process": Kind(f'{CFG} filter.k.process "$MARK" && {ATTRS}', ADD),
    "filter.smudge (undo)": Kind(f'{CFG} filter.k.smudge "$FILTER" && {ATTRS}', "git cat-file --filters HEAD:a.txt"),
    "filter in an include.path'd file, .gitattributes": Kind(
        f'{CFG} include.path ../filters.cfg && printf "[filter \\"k\\"]\\n\\tclean = %s\\n" "$FILTER" > '
        '"$R/filters.cfg" && printf "*.txt filter=k\\n" > "$R/.gitattributes"', ADD),
    "core.attributesFile": Kind(f'{CFG} filter.k.clean "$FILTER" && printf "*.txt filter=k\\n" > "$R/attrs" && '
                                f'{CFG} core.attributesFile "$R/attrs"', ADD),
    "core.hooksPath": Kind(f'mkdir "$R/hooks" && set -- "$R/hooks" && {HOOKS} && {CFG} core.hooksPath "$R/hooks"',
                           "git update-ref refs/control HEAD"),
    ".git/hooks": Kind(f'set -- "$R/.git/hooks" && {HOOKS}', ADD),
    "core.fsmonitor": Kind(f'{CFG} core.fsmonitor "$MARK"', ADD),
    "commit.gpgSign + gpg.program": Kind(f'{CFG} commit.gpgSign true && {CFG} gpg.program "$MARK"',
                                         "git commit-tree -S -m x HEAD^{tree}"),
    "diff.external, textconv, diff command": Kind(
        f'{CFG} diff.external "$MARK" && {CFG} diff.k.textconv "$MARK" && {CFG} diff.k.command "$MARK" && {ATTRS}',
        "echo changed >> a.txt && git diff"),
    "core.pager, pager.*": Kind(f'{CFG} core.pager "$MARK" && {CFG} pager.diff-tree "$MARK" && '
                                f'{CFG} pager.ls-tree "$MARK"', "git -p log -1 </dev/null"),
    "promisor remote (upload-pack, lazy fetch)": Kind(
        f'{CFG} core.repositoryformatversion 1 && {CFG} extensions.partialClone evil && '
        f'{CFG} remote.evil.url "$R/.." && {CFG} remote.evil.promisor true && {CFG} remote.evil.uploadpack "$MARK"',
        "git cat-file -p HEAD:a.txt"),
    "promisor remote over ssh (core.sshCommand)": Kind(
        f'{CFG} core.repositoryformatversion 1 && {CFG} extensions.partialClone evil && '
        f'{CFG} remote.evil.url evil.example:x && {CFG} remote.evil.promisor true && {CFG} core.sshCommand "$MARK"',
        "git cat-file -p HEAD:a.txt"),
}
# a promisor remote is asked for an object the repository lacks: the one of a.txt before the run
DROP_BLOB = ('blob=$(git rev-parse HEAD:a.txt) && rm ".git/objects/$(echo $blob | cut -c1-2)/$(echo $blob | cut -c3-)" '
             '&& ! ls .git/objects/pack/*.pack 2>/dev/null')
# the pager only runs on a terminal: its control cannot fire here (kept: kimik3 must not start one)
NO_CONTROL = {"core.pager, pager.*"}


def programs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The marker and the planted programs (outside the workspace, as a path the config names)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "marker"
    mark, filt = bin_dir / "mark", bin_dir / "filter"
    mark.write_text(f'#!/bin/sh\necho "$0 $* in $PWD, GIT_DIR=$GIT_DIR" >> {shlex.quote(str(marker))}\nexit 0\n')
    filt.write_text(f'#!/bin/sh\necho "$0 $* in $PWD, GIT_DIR=$GIT_DIR" >> {shlex.quote(str(marker))}\nexec cat\n')
    for p in (mark, filt):
        p.chmod(0o755)
    return marker, {"MARK": str(mark), "FILTER": str(filt)}


def plant_command(kind: Kind, repo: str, env: dict[str, str]) -> str:
    return (f"R=$(cd {shlex.quote(repo)} && pwd) MARK={shlex.quote(env['MARK'])} FILTER={shlex.quote(env['FILTER'])} "
            f"sh -c {shlex.quote(kind.plant)}")


def control(kind: Kind, repo: Path, marker: Path) -> None:
    """Plain git fires the planted kind: the marker appears."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["sh", "-c", kind.control], cwd=repo, env=env, capture_output=True, stdin=subprocess.DEVNULL,
                   timeout=120, check=False)
    assert marker.exists(), "the planted program did not fire with plain git: the test proves nothing"


_CHECKPOINTS_ONLY = FEATURES - {"background", "subagents", "read_before_edit"}


async def checkpointed_run(ws: Path, session: Path, *turns: str, sandbox: str = "none") -> None:
    agent = CodingHarness(ws, features=_CHECKPOINTS_ONLY, sandbox=sandbox).agent(
        engine=ScriptedEngine([*turns, answer("done")]))
    result = await agent.run("go", session=session)
    assert result.stop_reason == "completed"


def bash(command: str) -> str:
    return calls(("bash", {"command": command}))


@pytest.mark.parametrize("name", list(KINDS))
async def test_a_program_the_workspace_repository_names_never_runs(tmp_path: Path, name: str) -> None:
    kind = KINDS[name]
    marker, env = programs(tmp_path)
    ws = make_repo(tmp_path / "ws")
    subprocess.run(["sh", "-c", plant_command(kind, str(ws), env)], check=True, capture_output=True)
    assert not marker.exists()
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session,
                           calls(("write_file", {"path": "a.txt", "content": "rewritten\n"})),
                           bash("echo new > new.txt && echo more >> user.txt"))
    assert [r["changed"] for r in session_checkpoints(session)] == [["a.txt"], ["new.txt", "user.txt"]]
    assert not marker.exists(), marker.read_text()
    if "promisor" not in name:
        assert undo(session, workspace=ws) == ["a.txt", "new.txt", "user.txt"]
        assert (ws / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n" and not (ws / "new.txt").exists()
    else:  # the object a.txt must be restored from is gone (the model removed it): said, never fetched
        subprocess.run(["sh", "-c", DROP_BLOB], cwd=ws, check=True, capture_output=True)
        with pytest.raises(CheckpointError, match=r"^git cat-file failed: .*"):
            undo(session, workspace=ws)
        assert (ws / "a.txt").read_text() == "rewritten\n"
    assert not marker.exists(), marker.read_text()
    if name not in NO_CONTROL:
        control(kind, ws, marker)


@pytest.mark.parametrize("name", [n for n in KINDS if "promisor" not in n and "smudge" not in n])
async def test_a_program_a_repository_made_mid_run_names_never_runs(tmp_path: Path, name: str) -> None:
    """The model makes a repository in a subfolder (``git init``: its ``.git`` is the model's to
    write, sandbox or not) and plants the kind there; later checkpoints fingerprint it."""
    kind = KINDS[name]
    marker, env = programs(tmp_path)
    ws = make_repo(tmp_path / "ws")
    make = ("git init -q inner && cd inner && echo alpha > a.txt && git add a.txt && "
            "git -c user.name=m -c user.email=m@x commit -qm init && cd .. && ")
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session, bash(make + plant_command(kind, "inner", env)),
                           bash("echo edited >> inner/a.txt && echo new > inner/b.txt && echo top > top.txt"))
    assert not marker.exists(), marker.read_text()
    assert undo(session, workspace=ws, partial=True) == ["top.txt"]
    assert not marker.exists(), marker.read_text()
    if name not in NO_CONTROL:
        control(kind, ws / "inner", marker)


@needs_bwrap
async def test_a_filter_planted_inside_the_sandbox_does_not_run_outside_it(tmp_path: Path) -> None:
    """The escape as the sandbox's author found it: inside bubblewrap the model cannot write the
    workspace's ``.git/config``, but it can make a repository of its own and name a filter
    driver there; kimik3's checkpoint ran it outside the sandbox."""
    marker, env = programs(tmp_path)  # under /tmp: hidden inside the sandbox, so only an escape writes it
    ws = make_repo(tmp_path / "ws")
    shutil.copy(env["FILTER"], ws / "filter.sh")
    script = ("git init -q inner && cd inner && echo alpha > a.txt && git config filter.k.clean \"$PWD/../filter.sh\" "
              "&& printf '*.txt filter=k\\n' > .git/info/attributes")
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session, bash(script), bash("echo edited >> inner/a.txt && echo top > top.txt"),
                           sandbox="bwrap")
    assert not marker.exists(), marker.read_text()
    assert undo(session, workspace=ws, partial=True) == ["top.txt"]
    assert not marker.exists(), marker.read_text()
    control(KINDS["filter.clean"], ws / "inner", marker)


def objects(repo: Path) -> set[str]:
    return {f"{d.name}{f.name}" for d in (repo / ".git" / "objects").iterdir() if len(d.name) == 2 for f in d.iterdir()}


@pytest.mark.parametrize("lead", ["core.worktree", ".git file"])
async def test_a_nested_repository_leading_outside_the_workspace_is_never_snapshotted(tmp_path: Path,
                                                                                    lead: str) -> None:
    """A repository the model makes can name a work tree above the workspace (``core.worktree``:
    its snapshot would hash files outside the workspace into objects the model can read) or keep
    its git directory elsewhere (a ``.git`` file: the snapshot would write objects outside)."""
    (tmp_path / "secret.txt").write_text("outside the workspace\n")
    other = make_repo(tmp_path / "other")  # a repository of the user's, outside the workspace
    ws = make_repo(tmp_path / "ws")
    if lead == "core.worktree":
        make = f"git init -q inner && git -C inner config core.worktree {shlex.quote(str(tmp_path))}"
    else:
        make = f"mkdir inner && printf 'gitdir: %s\\n' {shlex.quote(str(other / '.git'))} > inner/.git"
    before = objects(other)
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session, bash(make + " && echo x > inner/f.txt"),
                           bash("echo y >> inner/f.txt && echo top > top.txt"))
    secret = subprocess.run(["git", "hash-object", str(tmp_path / "secret.txt")], capture_output=True, text=True,
                            check=True).stdout.strip()
    inner_git = ws / "inner" / ".git"
    if inner_git.is_dir():
        assert secret not in objects(ws / "inner")
    assert objects(other) == before
    assert undo(session, workspace=ws, partial=True) == ["top.txt"]
    assert objects(other) == before


# -- git without the repository's configuration still records and restores exactly -------------


async def test_git_variables_of_kimiks_environment_never_reach_its_git(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: kimik3 run from a git hook (``GIT_DIR``, ``GIT_INDEX_FILE`` set) checkpointed the
    hook's repository, not the workspace's."""
    other = make_repo(tmp_path / "other")
    refs_before = git(other, "for-each-ref")
    ws = make_repo(tmp_path / "ws")
    marker, env = programs(tmp_path)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hookspath'='{tmp_path}/hooks' 'core.fsmonitor'='{env['MARK']}'")
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session, bash("echo x >> a.txt"))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_PARAMETERS"):
        monkeypatch.delenv(name)
    [record] = session_checkpoints(session)
    assert (record["root"], record["changed"]) == (str(ws), ["a.txt"])
    assert git(other, "for-each-ref") == refs_before and git(ws, "for-each-ref", "refs/kimik3").count("\n") == 1
    assert not marker.exists()
    assert undo(session, workspace=ws) == ["a.txt"]


@pytest.mark.parametrize("layout", ["linked worktree", "sha256 objects", "submodule"])
async def test_checkpoints_and_undo_work_without_the_repositorys_configuration(tmp_path: Path, layout: str) -> None:
    ws = tmp_path / "ws"
    if layout == "linked worktree":
        main = make_repo(tmp_path / "main")
        git(main, "worktree", "add", "-q", str(ws))
        refs_of = main
    elif layout == "sha256 objects":
        ws.mkdir()
        git(ws, "init", "-q", "--object-format=sha256")
        (ws / "a.txt").write_bytes(b"alpha\r\nbeta\r\n")
        (ws / "user.txt").write_text("committed\n")
        git(ws, "add", "-A")
        git(ws, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "init")
        refs_of = ws
    else:
        outer = make_repo(tmp_path / "outer")
        source = make_repo(tmp_path / "source")
        subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "ws"],
                       cwd=outer, check=True, capture_output=True)
        ws = refs_of = outer / "ws"  # its git directory: outer/.git/modules/ws
    session = tmp_path / "s.jsonl"
    await checkpointed_run(ws, session, calls(("write_file", {"path": "a.txt", "content": "one\n"})),
                           bash("echo two > a.txt && echo new > new.txt && rm user.txt"))
    assert [r["changed"] for r in session_checkpoints(session)] == [["a.txt"], ["a.txt", "new.txt", "user.txt"]]
    assert git(refs_of, "for-each-ref", "--format=%(refname)", "refs/kimik3").count("\n") == 2
    assert undo(session, workspace=ws) == ["a.txt", "new.txt", "user.txt"]
    assert (ws / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n" and (ws / "user.txt").read_text() == "committed\n"
    assert not (ws / "new.txt").exists()


def test_a_fifo_where_a_config_file_should_be_is_a_time_limit_never_a_hang(tmp_path: Path) -> None:
    """A repository whose config includes a FIFO: git blocks reading it. kimik3's git is ended
    at its time limit (here 1 s) and the repository is left alone; run in a child process with a
    generous limit."""
    repo = make_repo(tmp_path / "repo")
    os.mkfifo(repo / "cfg")
    git(repo, "config", "include.path", "../cfg")
    code = ("import sys; from pathlib import Path; from kimik3.harness import _git; _git.GIT_TIMEOUT_S = 1.0; "
            "print(_git.find_repository(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}, check=True)
    assert out.stdout == "None\n"


def _refs(git_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(git_dir)) for p in (git_dir / "refs").rglob("*") if p.is_file())


async def test_checkpoints_never_follow_a_commondir_rewritten_during_the_run(tmp_path: Path) -> None:
    """Unsandboxed, a command points .git/commondir at a repository outside: kimik3's git creates
    nothing there, the run completes, and the later turns fall back to the copy kind, saying why."""
    ws = make_repo(tmp_path / "ws")
    evil = tmp_path / "evil"
    subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True)
    agent = CodingHarness(ws, features=_CHECKPOINTS_ONLY, sandbox="none").agent(
        engine=ScriptedEngine([bash(f"echo changed > a.txt; echo {evil} > .git/commondir"),
                               calls(("write_file", {"path": "user.txt", "content": "second\n"})), answer("done")]))
    with pytest.warns(RuntimeWarning, match="the workspace's repository changed during the run"):
        result = await agent.run("go", session=tmp_path / "s.jsonl")
    assert result.stop_reason == "completed"
    assert _refs(evil) == []
    records = session_checkpoints(tmp_path / "s.jsonl")
    assert [(r["turn"], r["kind"], r["changed"]) for r in records] == [(1, "git", ["a.txt"]),
                                                                    (2, "copy", ["user.txt"])]
    assert records[1]["uncovered"]["."] == (
        f"the workspace's repository changed during the run (now its git directory {ws / '.git'}, its common "
        f"directory {evil}): no more git checkpoints, only the files the file tools name are copied")
    (ws / ".git" / "commondir").unlink()
    assert [r.split("/")[-1] for r in _refs(ws / ".git") if r.startswith("refs/kimik3/")] == ["turn-1"]


async def test_a_linked_worktree_of_the_start_is_checkpointed_in_its_repository(tmp_path: Path) -> None:
    """Control: a workspace that is a linked worktree at the start (its git directory outside) is
    the user's own: snapshots go on, their refs in the main repository."""
    main = make_repo(tmp_path / "main")
    git(main, "worktree", "add", "-q", str(tmp_path / "ws"), "-b", "side")
    ws = tmp_path / "ws"
    await checkpointed_run(ws, tmp_path / "s.jsonl", calls(("write_file", {"path": "a.txt", "content": "new\n"})))
    records = session_checkpoints(tmp_path / "s.jsonl")
    assert [(r["kind"], r["changed"]) for r in records] == [("git", ["a.txt"])]
    assert [r.split("/")[-1] for r in _refs(main / ".git") if r.startswith("refs/kimik3/")] == ["turn-1"]
