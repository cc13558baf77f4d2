"""``undo`` against a hostile workspace and crafted session records (issue 26, item 1): on real git
repositories and plain directories (the copy kind), nothing outside the workspace is touched and
nothing is lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import CheckpointError, SessionError
from kimik3.agents import SessionWriter, load_session
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints, undo
from kimik3.harness import _undo as undo_module

from .helpers import answer, calls, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


async def run(ws: Path, session: Path, *turns: str) -> None:
    agent = CodingHarness(ws, features=FEATURES - {"background", "subagents", "read_before_edit"}).agent(
        engine=ScriptedEngine([*turns, answer("done")]))
    result = await agent.run("go", session=session)
    assert result.stop_reason == "completed"


def bash(command: str) -> str:
    return calls(("bash", {"command": command}))


def write(path: str, content: str) -> str:
    return calls(("write_file", {"path": path, "content": content}))


def tree_bytes(root: Path) -> dict[str, bytes | str]:
    """Every entry below ``root`` but ``.git``: file bytes, ``->target`` for symlinks, ``/`` for
    directories."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            out[rel] = f"->{os.readlink(p)}" if p.is_symlink() else "/" if p.is_dir() else p.read_bytes()
    return out


def session_file(tmp_path: Path, *records: dict[str, Any] | str) -> Path:
    s = tmp_path / "s.jsonl"
    lines = [json.dumps({"kimik3_session": 1, "created": 0})]
    lines += [r if isinstance(r, str) else json.dumps(r) for r in records]
    s.write_text("\n".join(lines) + "\n")
    return s


# -- symlinks ------------------------------------------------------------------------------------


async def test_a_tracked_symlink_made_a_directory_is_restored_without_writing_through_it(tmp_path: Path) -> None:
    """The issue's attack: the repository tracks link -> ../esc2; the agent runs
    ``rm link && mkdir link && echo agent > link/f``. Before: undo restored the symlink, then
    deleted link/f through it (the user's ../esc2/f). Now: link/f goes first, then the symlink."""
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "esc2").mkdir()
    (tmp_path / "esc2" / "f").write_text("the user's file outside the workspace\n")
    os.symlink("../esc2", repo / "link")
    git(repo, "add", "link")
    git(repo, "commit", "-qm", "link")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("rm link && mkdir link && echo agent > link/f"))
    assert (repo / "link" / "f").read_text() == "agent\n" and not (repo / "link").is_symlink()
    assert undo(session, workspace=repo) == ["link", "link/f"]
    assert os.readlink(repo / "link") == "../esc2"
    assert tree_bytes(tmp_path / "esc2") == {"f": b"the user's file outside the workspace\n"}
    assert git(repo, "status", "--porcelain") == ""


async def test_the_symlink_attack_in_a_plain_directory_is_said_not_undone(tmp_path: Path) -> None:
    """Copy kind: bash's changes are not recorded, so undo says so; ../esc2/f is never touched."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "esc2").mkdir()
    (tmp_path / "esc2" / "f").write_text("the user's file outside the workspace\n")
    os.symlink("../esc2", ws / "link")
    session = tmp_path / "s.jsonl"
    await run(ws, session, bash("rm link && mkdir link && echo agent > link/f"))
    for partial in (False, True):
        with pytest.raises(CheckpointError, match=r"do not cover: \. \(turn 1: outside a git repository the changes "
                                                  r"bash made are not recorded"):
            undo(session, workspace=ws, partial=partial, force=True)
    assert tree_bytes(tmp_path / "esc2") == {"f": b"the user's file outside the workspace\n"}
    assert (ws / "link" / "f").read_text() == "agent\n"


def test_a_git_record_naming_no_commit_of_the_repository_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    missing = "1234567890" * 4
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "git", "root": str(repo), "before": missing,
                                               "after": missing, "changed": ["a.txt"]}})
    with pytest.raises(CheckpointError) as e:
        undo(s, workspace=repo, force=True)
    assert str(e.value) == (f"the checkpoint of turn 1 names {missing}, which is not a commit of the repository of "
                            f"{repo}; nothing was changed")
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"


async def test_a_directory_swapped_for_an_outside_symlink_is_never_written_through(tmp_path: Path) -> None:
    """Turn 1 makes d/f; turn 2 swaps d for a symlink out of the workspace. Undoing turn 2 puts
    the directory back (the symlink removed, then d/f written into a real d); ../esc stays."""
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "esc").mkdir()
    (tmp_path / "esc" / "f").write_text("outside\n")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("mkdir d && echo one > d/f"), bash("rm -r d && ln -s ../esc d"))
    assert undo(session, 1, workspace=repo) == ["d", "d/f"]
    assert not (repo / "d").is_symlink() and (repo / "d" / "f").read_text() == "one\n"
    assert tree_bytes(tmp_path / "esc") == {"f": b"outside\n"}
    assert undo(session, 0, workspace=repo) == ["d/f"]
    assert not (repo / "d").exists() and tree_bytes(tmp_path / "esc") == {"f": b"outside\n"}


async def test_a_symlink_put_on_the_way_after_the_run_is_refused(tmp_path: Path) -> None:
    """Copy kind: after the run, sub (which held the agent's file) became a symlink to outside,
    where a file of the same name waits; undo would write ../outside/a.txt through it. Refused
    (even with force); nothing changes. A file the agent made there counts as already gone."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "a.txt").write_text("v0\n")
    (tmp_path / "outside").mkdir()
    session = tmp_path / "s.jsonl"
    await run(ws, session, calls(("write_file", {"path": "sub/a.txt", "content": "agent\n"}),
                                 ("write_file", {"path": "sub/new.txt", "content": "agent\n"})))
    shutil.rmtree(ws / "sub")
    os.symlink("../outside", ws / "sub")
    for name in ("a.txt", "new.txt"):
        (tmp_path / "outside" / name).write_text("agent\n")
    with pytest.raises(CheckpointError, match=r"^changed after the agent's last turn \(use --force to overwrite\): "
                                              r"sub/a.txt$"):
        undo(session, workspace=ws)
    with pytest.raises(CheckpointError, match=r"^cannot restore: sub/a.txt \(sub is a symbolic link; undo writes "
                                              r"through no symlink\); nothing was changed$"):
        undo(session, workspace=ws, force=True)
    assert tree_bytes(tmp_path / "outside") == {"a.txt": b"agent\n", "new.txt": b"agent\n"}
    assert os.readlink(ws / "sub") == "../outside"


async def test_copies_record_the_path_a_symlink_inside_the_workspace_leads_to(tmp_path: Path) -> None:
    """Copy kind: write_file("lnk/f.txt") with lnk -> real writes real/f.txt; the record (and undo)
    name real/f.txt, so undo never has to go through lnk."""
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "f.txt").write_bytes(b"v0\n")
    os.symlink("real", ws / "lnk")
    session = tmp_path / "s.jsonl"
    await run(ws, session, write("lnk/f.txt", "v1\n"))
    assert [(r["kind"], r["changed"]) for r in session_checkpoints(session)] == [("copy", ["real/f.txt"])]
    assert undo(session, workspace=ws) == ["real/f.txt"]
    assert (ws / "real" / "f.txt").read_bytes() == b"v0\n" and os.readlink(ws / "lnk") == "real"


# -- crafted records -------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_the_crafted_victim_record_is_refused_with_and_without_force(tmp_path: Path, force: bool) -> None:
    """The issue's one-line record: before, it deleted ../victim/data.txt without --force (and
    anything with "root": "/" and --force). Now a one-line CheckpointError naming the line."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "data.txt").write_text("precious\n")
    rel = "../victim/data.txt"
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "copy", "root": str(ws), "dir": str(tmp_path),
                                               "files": {rel: None}, "after": {rel: None}, "changed": [rel]}})
    with pytest.raises(CheckpointError) as e:
        undo(s, workspace=ws, force=force)
    assert str(e.value) == (f"{s}:2: invalid checkpoint record: changed holds '../victim/data.txt', not a relative "
                            "path inside the workspace; nothing was changed")
    assert (tmp_path / "victim" / "data.txt").read_text() == "precious\n"
    assert s.read_text().count("\n") == 2  # no undo record appended


BAD_PATHS = ["../x", "/etc/passwd", "a/../../x", "a//b", "./a", "a/.", "a/", "", "a\x00b", "\ud800"]


# ``.git/hooks/pre-commit`` only for a git checkpoint: a plain directory (copy) may hold a folder named .git
@pytest.mark.parametrize(("bad", "kind"), [*((b, k) for b in BAD_PATHS for k in ("git", "copy")),
                                           (".git/hooks/pre-commit", "git")])
def test_every_record_path_must_be_relative_and_inside(tmp_path: Path, kind: str, bad: str) -> None:
    repo = make_repo(tmp_path / "repo")
    if kind == "git":
        head = git(repo, "rev-parse", "HEAD").strip()
        rec: dict[str, Any] = {"turn": 1, "kind": "git", "root": str(repo), "before": head, "after": head,
                               "changed": ["a.txt", bad]}
    else:
        rec = {"turn": 1, "kind": "copy", "root": str(repo), "dir": str(tmp_path / "s.jsonl.checkpoints" / "turn-1"),
               "files": {bad: None}, "after": {bad: None}, "changed": [bad]}
    s = session_file(tmp_path, {"checkpoint": rec})
    before = tree_bytes(tmp_path)
    with pytest.raises(CheckpointError, match=rf"^{s}:2: invalid checkpoint record: changed holds .*; nothing was "
                                              r"changed$"):
        undo(s, workspace=repo, force=True)
    assert tree_bytes(tmp_path) == before


def test_root_slash_with_force_is_refused(tmp_path: Path) -> None:
    """Before: ``"root": "/"`` with --force deleted any file. The root must be the workspace."""
    (tmp_path / "victim.txt").write_text("precious\n")
    rel = str(tmp_path / "victim.txt").lstrip("/")
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "copy", "root": "/", "dir": str(tmp_path),
                                               "files": {rel: None}, "after": {rel: None}, "changed": [rel]}})
    with pytest.raises(CheckpointError, match=rf"^{s}:2: the checkpoint of turn 1 is for the workspace '/', not "
                                              rf"'{tmp_path}'; undo restores only the workspace it is run for"):
        undo(s, workspace=tmp_path, force=True)
    assert (tmp_path / "victim.txt").read_text() == "precious\n"


def test_dir_pointing_elsewhere_is_refused(tmp_path: Path) -> None:
    """Before: ``dir`` naming another directory overwrote workspace files with its content."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("mine\n")
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "0.bin").write_text("evil\n")
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "copy", "root": str(ws), "dir": str(tmp_path / "evil"),
                                               "files": {"a.txt": "0.bin"}, "after": {"a.txt": None},
                                               "changed": ["a.txt"]}})
    with pytest.raises(CheckpointError, match=rf"^{s}:2: invalid checkpoint record: dir is '{tmp_path}/evil', not "
                                              rf"kimik3's copy directory '{s}.checkpoints/turn-1'; nothing was changed$"):
        undo(s, workspace=ws, force=True)
    assert (ws / "a.txt").read_text() == "mine\n"


def test_a_copy_name_outside_the_copy_directory_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("mine\n")
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "copy", "root": str(ws),
                                               "dir": str(tmp_path / "s.jsonl.checkpoints/turn-1"),
                                               "files": {"a.txt": "../../evil"}, "after": {"a.txt": None},
                                               "changed": ["a.txt"]}})
    with pytest.raises(CheckpointError, match=r"files\['a.txt'\] is '../../evil', not a copy of kimik3's"):
        undo(s, workspace=ws, force=True)
    assert (ws / "a.txt").read_text() == "mine\n"


MALFORMED: list[tuple[Any, str]] = [
    ('{"checkpoint": 5}', "expected an object, got int"),
    ('{"checkpoint": {"kind": "git"}}', "turn is None, not a turn number"),
    ('{"checkpoint": {"turn": "1", "kind": "git"}}', "turn is '1', not a turn number"),
    ('{"checkpoint": {"turn": true, "kind": "git"}}', "turn is True, not a turn number"),
    ('{"checkpoint": {"turn": 1, "kind": "zip", "root": "ROOT"}}', "kind is 'zip', not 'git' or 'copy'"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": 7}}', "root is 7, not an absolute path"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": "ROOT"}}', "changed is not a list"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": "ROOT", "changed": [1]}}', "changed holds 1, not a path"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": "ROOT", "changed": ["a.txt"], "before": "HEAD", "after": "x"}}',
     "before is 'HEAD', not a commit id"),
    ('{"checkpoint": {"turn": 1, "kind": "copy", "root": "ROOT", "changed": ["a.txt"], "files": {}, "after": {}}}',
     "files and after must be objects with the changed paths as keys"),
    ('{"checkpoint": {"turn": 1, "kind": "copy", "root": "ROOT", "changed": ["a.txt"], "files": {"a.txt": null}, '
     '"after": {"a.txt": "abc"}}}', "after['a.txt'] is 'abc', not a SHA-256"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": "ROOT", "changed": [], "uncovered": ["x"]}}',
     "uncovered is not an object of short texts"),
    ('{"checkpoint": {"turn": 1, "kind": "git", "root": "ROOT", "changed": [], "uncovered": {"../x": "y"}}}',
     "uncovered holds '../x', not a relative path inside the workspace"),
    ('{"undo": {"to": "x"}}', "an undo record whose 'to' is 'x', not a turn number"),
]
ODD_LINES = [  # not a record at all: the one session reader's SessionError (kimik3.agents.SessionLog), line named
    ('{"checkpoint": {"turn": 1}, "extra": 1}', "unknown record (keys: checkpoint, extra)"),
    ('{"checkpoint": {"turn": 1,', "not a JSON line"),
    (b'{"checkpoint": "\xff"}', "not UTF-8 text"),
]


@pytest.mark.parametrize(("line", "why"), MALFORMED)
def test_a_malformed_record_is_one_line_naming_it(tmp_path: Path, line: str | bytes, why: str) -> None:
    """Before: KeyError / TypeError tracebacks (or silently skipped). Now a one-line error."""
    repo = make_repo(tmp_path / "repo")
    s = tmp_path / "s.jsonl"
    raw = line if isinstance(line, bytes) else line.replace("ROOT", str(repo)).encode()
    s.write_bytes(json.dumps({"kimik3_session": 1, "created": 0}).encode() + b"\n" + raw + b"\n" + b'{"undo": {"to": 0}}\n')
    before = tree_bytes(repo)
    with pytest.raises(CheckpointError) as e:
        undo(s, workspace=repo)
    assert str(e.value).startswith(f"{s}:2: invalid checkpoint record: ") and why in str(e.value)
    assert "\n" not in str(e.value) and str(e.value).endswith("; nothing was changed")
    assert tree_bytes(repo) == before


@pytest.mark.parametrize(("line", "why"), ODD_LINES)
def test_an_odd_line_is_the_session_readers_error_naming_it(tmp_path: Path, line: str | bytes, why: str) -> None:
    repo = make_repo(tmp_path / "repo")
    s = tmp_path / "s.jsonl"
    raw = line if isinstance(line, bytes) else line.encode()
    s.write_bytes(json.dumps({"kimik3_session": 1, "created": 0}).encode() + b"\n" + raw + b"\n" + b'{"undo": {"to": 0}}\n')
    before = tree_bytes(repo)
    with pytest.raises(SessionError) as e:
        undo(s, workspace=repo)
    assert str(e.value).startswith(f"{s}:2: ") and why in str(e.value) and "\n" not in str(e.value)
    assert tree_bytes(repo) == before


def test_a_torn_last_line_is_a_crash_not_an_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    s = tmp_path / "s.jsonl"
    s.write_text(json.dumps({"kimik3_session": 1, "created": 0}) + '\n{"checkpoint": {"turn": 1, "ki')
    with pytest.raises(CheckpointError, match=r"no recorded changes after turn 0; nothing to undo$"):
        undo(s, workspace=repo)


async def test_undo_after_a_crash_leaves_a_valid_session(tmp_path: Path) -> None:
    """A session whose last line was torn by a crash: undo drops it (as a writer does) before
    appending its own record, so the file stays a valid session."""
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("echo x > a.txt"))
    with open(session, "a") as f:
        f.write('{"message": {"role": "ass')
    assert undo(session, workspace=repo) == ["a.txt"]
    assert load_session(session)[-1].content == "done"
    assert json.loads(session.read_text().splitlines()[-1]) == {"undo": {"to": 0, "paths": ["a.txt"]}}


async def test_undo_for_another_workspace_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    other = make_repo(tmp_path / "other")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("echo x > a.txt"))
    with pytest.raises(CheckpointError, match=f"is for the workspace '{repo}', not '{other}'"):
        undo(session, workspace=other)
    assert (repo / "a.txt").read_text() == "x\n"
    assert undo(session, workspace=repo) == ["a.txt"]


async def test_undo_refuses_a_session_a_run_is_writing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("echo x > a.txt"))
    writer = SessionWriter(session)
    try:
        with pytest.raises(SessionError, match=r"is in use by pid \d+ \(this process\)"):
            undo(session, workspace=repo)
    finally:
        writer.close()
    assert (repo / "a.txt").read_text() == "x\n"


# -- a directory where a file was ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["git", "copy"])
async def test_force_never_removes_a_directory_tree_the_user_put_where_a_file_was(tmp_path: Path, kind: str) -> None:
    """Before: --force ran shutil.rmtree on it and printed "restored a.txt". Now refused, naming
    the user's files; nothing is changed."""
    ws = make_repo(tmp_path / "ws") if kind == "git" else tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_bytes(b"v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, write("a.txt", "agent\n"))
    (ws / "a.txt").unlink()
    (ws / "a.txt").mkdir()
    (ws / "a.txt" / "user.txt").write_text("the user's work\n")
    before = tree_bytes(ws)
    with pytest.raises(CheckpointError) as e:
        undo(session, workspace=ws, force=True)
    assert str(e.value) == ("cannot restore: a.txt (a directory stands where the file was, holding files the agent's "
                            "turns did not make: a.txt/user.txt; move it away, then undo again); nothing was changed")
    assert tree_bytes(ws) == before


async def test_a_directory_the_agent_made_where_a_file_was_is_replaced(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("rm a.txt && mkdir -p a.txt/deep && echo x > a.txt/deep/f"))
    assert undo(session, workspace=repo) == ["a.txt", "a.txt/deep/f"]
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"
    assert git(repo, "status", "--porcelain") == ""


# -- all or nothing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["git", "copy"])
async def test_a_failure_midway_puts_back_what_changed_and_the_next_undo_works(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_repo(tmp_path / "ws") if kind == "git" else tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    for name in ("1.txt", "2.txt", "3.txt"):
        (ws / name).write_text(f"{name} v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, calls(*(("write_file", {"path": n, "content": f"{n} agent\n"}) for n in ("1.txt", "2.txt", "3.txt")),
                                 ("write_file", {"path": "new/n.txt", "content": "made\n"})))
    after_run = tree_bytes(ws)
    real_rename = os.rename

    def failing(src: Any, dst: Any, **kw: Any) -> None:
        if dst == "3.txt":
            raise OSError(28, "No space left on device")
        real_rename(src, dst, **kw)

    monkeypatch.setattr(undo_module.os, "rename", failing)
    with pytest.raises(CheckpointError) as e:
        undo(session, workspace=ws)
    assert str(e.value) == ("undo could not write 3.txt: No space left on device; everything it had changed was put "
                            "back; nothing was undone")
    assert tree_bytes(ws) == after_run  # new/n.txt and 1.txt, 2.txt back as the agent left them
    assert session.read_text().count('{"undo"') == 0
    monkeypatch.setattr(undo_module.os, "rename", real_rename)
    assert undo(session, workspace=ws) == ["1.txt", "2.txt", "3.txt", "new/n.txt"]
    assert {n: (ws / n).read_text() for n in ("1.txt", "2.txt", "3.txt")} == {
        n: f"{n} v0\n" for n in ("1.txt", "2.txt", "3.txt")}
    assert not (ws / "new").exists()


@pytest.mark.parametrize("kind", ["git", "copy"])
async def test_an_interrupted_undo_does_not_block_the_next(tmp_path: Path, kind: str) -> None:
    """An undo killed after restoring one file: that file is as undo wants it, not "changed after
    the agent's last turn"; the next undo finishes the job without --force."""
    ws = make_repo(tmp_path / "ws") if kind == "git" else tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "x.txt").write_text("x v0\n")
    (ws / "y.txt").write_text("y v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, calls(("write_file", {"path": "x.txt", "content": "x agent\n"}),
                                 ("write_file", {"path": "y.txt", "content": "y agent\n"})))
    (ws / "x.txt").write_text("x v0\n")  # what the killed undo had done
    assert undo(session, workspace=ws) == ["x.txt", "y.txt"]
    assert (ws / "y.txt").read_text() == "y v0\n"


# -- what a checkpoint cannot cover ------------------------------------------------------------------


def add_submodule(repo: Path, source: Path, name: str) -> None:
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), name],
                   cwd=repo, check=True, capture_output=True)
    git(repo, "commit", "-qm", f"add {name}")


async def test_a_submodule_gitlink_among_the_paths_is_said_and_partial_restores_the_rest(tmp_path: Path) -> None:
    """Before: undo wrote the gitlink as a file (or failed midway) and reported success."""
    repo = make_repo(tmp_path / "repo")
    add_submodule(repo, make_repo(tmp_path / "src"), "sm")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("echo x > a.txt && cd sm && echo y > user.txt && "
                                  "git -c user.name=a -c user.email=b commit -qam agent"))
    [rec] = session_checkpoints(session)
    assert (rec["changed"], list(rec["uncovered"])) == (["a.txt"], ["sm"])
    with pytest.raises(CheckpointError) as e:
        undo(session, workspace=repo)
    assert str(e.value) == (
        "the checkpoints after turn 0 do not cover: sm (turn 1: a submodule or nested repository: the files inside "
        "it are not in the checkpoints, and undo does not move its HEAD); undo with partial=True (kimik3 undo "
        "--partial) to restore only a.txt; nothing was changed")
    assert (repo / "a.txt").read_text() == "x\n"
    assert undo(session, workspace=repo, partial=True) == ["a.txt"]
    assert (repo / "a.txt").read_bytes() == b"alpha\r\nbeta\r\n"
    assert (repo / "sm" / "user.txt").read_text() == "y\n"  # not undone, and said so


@pytest.mark.parametrize("nested", ["submodule", "nested repository", "nested repository without a commit",
                                    "nested repository without a commit, workspace in a subdirectory"])
async def test_edits_inside_a_nested_repository_are_said(tmp_path: Path, nested: str) -> None:
    """Before: 0 records, "nothing to undo" (or, without a commit, git add failed and ended the run)."""
    repo = make_repo(tmp_path / "repo")
    ws = repo / "sub" if "subdirectory" in nested else repo
    if nested == "submodule":
        add_submodule(repo, make_repo(tmp_path / "src"), "inner")
    elif nested == "nested repository":
        make_repo(ws / "inner")
    else:
        (ws / "inner").mkdir()
        git(ws / "inner", "init", "-q")
        (ws / "inner" / "draft.txt").write_text("draft\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, bash("echo edited >> inner/user.txt && echo top > top.txt"))
    assert [(r["turn"], r["changed"], list(r["uncovered"])) for r in session_checkpoints(session)] == [
        (1, ["top.txt"], ["inner"])]
    with pytest.raises(CheckpointError, match=r"^the checkpoints after turn 0 do not cover: inner \(turn 1: a submodule "
                                              r"or nested repository: .*\); undo with partial=True \(kimik3 undo "
                                              r"--partial\) to restore only top.txt; nothing was changed$"):
        undo(session, workspace=ws)
    assert undo(session, workspace=ws, partial=True) == ["top.txt"]
    assert not (ws / "top.txt").exists() and (ws / "inner" / "user.txt").read_text().endswith("edited\n")
    again = tmp_path / "again.jsonl"
    await run(ws, again, bash("echo again >> inner/user.txt"))  # only uncovered changes: said, nothing to do
    with pytest.raises(CheckpointError, match=r"do not cover: inner \(turn 1: .*\); nothing the checkpoints "
                                              r"recorded can be undone; nothing was changed$"):
        undo(again, workspace=ws, partial=True)


@pytest.mark.parametrize("expect_outside", [False, True])
async def test_writes_outside_a_sparse_checkout_cone_are_covered(tmp_path: Path, expect_outside: bool) -> None:
    """Before: git add refused the new out/n.txt and the run ended (or out/o.txt stayed
    modified while undo printed "restored in/new.txt"). Now the disk is recorded as it is."""
    repo = make_repo(tmp_path / "repo")
    for d in ("in", "out"):
        (repo / d).mkdir()
        (repo / d / f"{d[0]}.txt").write_text(f"{d}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "in and out")
    git(repo, "sparse-checkout", "set", "in")
    if expect_outside:
        git(repo, "config", "sparse.expectFilesOutsideOfPatterns", "true")
    assert not (repo / "out").exists()
    status = git(repo, "status", "--porcelain")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("echo new > in/new.txt; mkdir -p out; echo changed > out/o.txt; echo n > out/n.txt"))
    assert [r["changed"] for r in session_checkpoints(session)] == [["in/new.txt", "out/n.txt", "out/o.txt"]]
    assert undo(session, workspace=repo) == ["in/new.txt", "out/n.txt", "out/o.txt"]
    assert not (repo / "out").exists() and not (repo / "in" / "new.txt").exists()
    assert git(repo, "status", "--porcelain") == status
    assert git(repo, "ls-files", "-t", "out/o.txt") == "S out/o.txt\n"  # the user's index untouched


async def test_bash_outside_git_is_said(tmp_path: Path) -> None:
    """Copy kind: bash's changes are not recorded; undo says so instead of reporting success."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, calls(("write_file", {"path": "f.txt", "content": "v1\n"}), ("bash", {"command": "echo b > b.txt"})))
    [rec] = session_checkpoints(session)
    assert rec["uncovered"] == {".": "outside a git repository the changes bash made are not recorded (only the files "
                                     "the file tools name are copied)"}
    with pytest.raises(CheckpointError, match=r"do not cover: \. \(turn 1: outside a git repository .*\); undo with "
                                              r"partial=True "
                                              r"\(kimik3 undo --partial\) to restore only f.txt; nothing was changed$"):
        undo(session, workspace=ws)
    assert undo(session, workspace=ws, partial=True) == ["f.txt"]
    assert (ws / "f.txt").read_text() == "v0\n" and (ws / "b.txt").read_text() == "b\n"


# -- names ------------------------------------------------------------------------------------------


async def test_non_utf8_file_names_made_by_bash(tmp_path: Path) -> None:
    """Before: UnicodeEncodeError in the session writer ended the run."""
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / "s.jsonl"
    await run(repo, session, bash("printf x > $'bad\\xe9.txt' && printf y > $'line\\nbreak.txt'"))
    session.read_bytes().decode("utf-8")  # still UTF-8 text
    assert load_session(session)[-1].content == "done"
    names = ["bad\udce9.txt", "line\nbreak.txt"]
    assert session_checkpoints(session)[0]["changed"] == names
    assert undo(session, workspace=repo) == names
    assert not any(name in os.listdir(repo) for name in names)
    assert b"bad\xe9.txt" not in os.listdir(os.fsencode(repo))


async def test_non_utf8_names_in_a_plain_directory(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, write("caf\\xe9.txt", "v1\n"))  # the escaped form the tools print
    assert session_checkpoints(session)[0]["changed"] == ["caf\udce9.txt"]
    assert undo(session, workspace=ws) == ["caf\udce9.txt"]
    assert (ws / os.fsdecode(b"caf\xe9.txt")).read_bytes() == b"v0\n"


@pytest.mark.parametrize("name", [".hidden.jsonl", "my..run.jsonl", "x.lock.jsonl", "a@{b}.jsonl", "sp ace~^:?*[.jsonl",
                                  "ends.", "-.jsonl"])
async def test_session_names_that_are_no_valid_ref_names(tmp_path: Path, name: str) -> None:
    """Before: .hidden.jsonl and my..run.jsonl failed in git update-ref and ended the run."""
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / name
    await run(repo, session, bash("echo x > n.txt"))
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/kimik3").split()
    assert len(refs) == 1
    subprocess.run(["git", "check-ref-format", refs[0]], check=True)
    assert undo(session, workspace=repo) == ["n.txt"]
    assert not (repo / "n.txt").exists()


# -- the command line ---------------------------------------------------------------------------------


def kimik3(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from kimik3.cli import main

    r = CliRunner().invoke(main, ["undo", *args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


async def test_the_cli_says_what_it_does_not_undo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("v0\n")
    session = tmp_path / "s.jsonl"
    await run(ws, session, calls(("write_file", {"path": "f.txt", "content": "v1\n"}), ("bash", {"command": "true"})))
    code, out, err = kimik3(str(session), "-w", str(ws))
    assert (code, out) == (1, "")
    assert err.startswith("error: the checkpoints after turn 0 do not cover: . (turn 1: outside a git repository the "
                          "changes bash made are not recorded") and err.count("\n") == 1
    assert (ws / "f.txt").read_text() == "v1\n"
    monkeypatch.chdir(ws)  # --workspace defaults to the current directory
    assert kimik3(str(session), "--partial") == (
        0, "restored f.txt\n", "not undone: . (turn 1: outside a git repository the changes bash made are not "
                               "recorded (only the files the file tools name are copied))\n")
    assert (ws / "f.txt").read_text() == "v0\n"


def test_the_cli_refuses_a_crafted_record_in_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "victim.txt").write_text("precious\n")
    s = session_file(tmp_path, {"checkpoint": {"turn": 1, "kind": "git", "root": str(ws), "before": "0" * 40,
                                               "after": "0" * 40, "changed": ["../victim.txt"]}})
    assert kimik3(str(s), "-w", str(ws), "--force") == (
        1, "", f"error: {s}:2: invalid checkpoint record: changed holds '../victim.txt', not a relative path inside "
               "the workspace; nothing was changed\n")
    assert (tmp_path / "victim.txt").read_text() == "precious\n"
