"""Issue 40 part 5: a resumed run works where its session says. The issue's case: a deferred
``rm -f marker.txt`` approved with ``kimik3 approve``, then resumed with the printed
``continue with`` line from another folder, deleted the marker *there*. Now the session's header
records its workspace, ``kimik3 resume`` works in it, a different ``-w`` (or an SDK harness of
another workspace) is refused naming both, and the printed line runs as printed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner, Result

from kimik3 import Allow, Defer, ScriptedEngine, SessionError
from kimik3.agents import PendingCall, SessionLog
from kimik3.cli import main
from kimik3.harness import FEATURES, CodingHarness

from .helpers import answer, calls

FEATURES_ = FEATURES - {"background", "checkpoints", "subagents", "skills"}


def defer_bash(call: PendingCall) -> Allow | Defer:
    return Defer() if call.name == "bash" else Allow()


def deferred(tmp_path: Path) -> tuple[Path, Path, Path]:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    for folder in (ws, other):
        (folder / "marker.txt").write_text("keep?\n")
    session = tmp_path / "s.jsonl"
    agent = CodingHarness(ws, features=FEATURES_, sandbox="none").agent(
        engine=ScriptedEngine([calls(("bash", {"command": "rm -f marker.txt"}))]), approval=defer_bash)
    result = anyio.run(lambda: agent.run("clean up", session=session))
    assert result.stop_reason == "approval_required"
    return session, ws, other


def test_the_printed_continue_line_runs_as_printed_from_another_folder(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    session, ws, other = deferred(tmp_path)
    assert SessionLog.read(session).header["workspace"] == str(ws.resolve())
    monkeypatch.chdir(other)  # approve and resume from another folder, with relative paths
    out = CliRunner().invoke(main, ["approve", "../s.jsonl", "--all"])
    assert out.exit_code == 0, out.output
    line = out.output.splitlines()[-1]
    assert line == f"continue with: kimik3 resume {shlex.quote(str(session.resolve()))}"
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([answer("cleaned")]))
    argv = shlex.split(line.removeprefix("continue with: "))[1:]  # as printed, plus the engine (an env var for a user)
    done = CliRunner().invoke(main, [*argv, "--script", str(script), "--plain", "--sandbox", "none"])
    assert done.exit_code == 0, done.output
    assert not (ws / "marker.txt").exists()  # the session's workspace
    assert (other / "marker.txt").read_text() == "keep?\n"  # not the folder it was run from


def test_another_workspace_is_refused_naming_both(tmp_path: Path) -> None:
    session, ws, other = deferred(tmp_path)
    assert CliRunner().invoke(main, ["approve", str(session), "--all"]).exit_code == 0
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([answer("cleaned")]))
    out = CliRunner().invoke(main, ["resume", str(session), "-w", str(other), "--script", str(script), "--plain",
                                    "--sandbox", "none"])
    assert out.exit_code == 1
    assert (f"error: SessionError: session {session} works in {str(ws.resolve())!a}, not in "
            f"{str(other.resolve())!a}; nothing was run: continue it there (kimik3 resume {session}, or with -w "
            f"{ws.resolve()})") in out.output
    # the SDK: a harness of another workspace refuses the session before anything runs (variant)
    agent = CodingHarness(other, features=FEATURES_, sandbox="none").agent(engine=ScriptedEngine([answer("x")]))
    with pytest.raises(SessionError, match=f"works in {str(ws.resolve())!a}, not in {str(other.resolve())!a}"):
        anyio.run(agent.resume, session)
    assert (ws / "marker.txt").exists() and (other / "marker.txt").exists()


def test_a_harness_resume_with_approvals_reads_and_locks_the_session_once(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 with every hook that reads the session (skills, checkpoints, routing, approvals):
    before, 4 opens, 2 locks and 8 whole-file reads; now one of each."""
    import fcntl
    import os

    session, ws, _ = deferred(tmp_path)
    [pending] = SessionLog.read(session).records_of("deferred")
    counts = {"open": 0, "lock": 0, "read": 0}
    real_open, real_flock, real_seek = os.open, fcntl.flock, os.lseek

    def counting_open(path: object, *args: object, **kwargs: object) -> int:
        counts["open"] += os.fspath(path) == os.fspath(session)  # type: ignore[arg-type]
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def counting_flock(fd: int, op: int) -> None:
        counts["lock"] += bool(op & fcntl.LOCK_EX)
        real_flock(fd, op)

    def counting_seek(fd: int, pos: int, how: int) -> int:
        if (pos, how) == (0, os.SEEK_SET) and os.path.samefile(f"/proc/self/fd/{fd}", session):
            counts["read"] += 1
        return real_seek(fd, pos, how)

    agent = CodingHarness(ws, sandbox="none").agent(engine=ScriptedEngine([answer("cleaned")]))
    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(fcntl, "flock", counting_flock)
    monkeypatch.setattr(os, "lseek", counting_seek)
    result = anyio.run(lambda: agent.resume(session, approvals={pending.body["call_id"]: Allow()}))
    monkeypatch.undo()
    assert result.output == "cleaned" and not (ws / "marker.txt").exists()
    assert counts == {"open": 1, "lock": 1, "read": 1}


def _header(session: Path, **fields: object) -> None:
    """Rewrite the session's header with ``fields`` (None: the field removed)."""
    lines = session.read_text().splitlines()
    header = json.loads(lines[0])
    for key, value in fields.items():
        if value is None:
            header.pop(key, None)
        else:
            header[key] = value
    session.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")


def _resume(tmp_path: Path, argv: list[str]) -> Result:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([answer("cleaned")]))
    return CliRunner().invoke(main, [*argv, "--script", str(script), "--plain", "--sandbox", "none"])


@pytest.mark.parametrize("spelling", ["dotdot", "symlink"])
@pytest.mark.parametrize("fix", [0, 1])
def test_a_recorded_workspace_is_compared_resolved_and_each_printed_fix_runs_as_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str, fix: int) -> None:
    session, ws, other = deferred(tmp_path)
    (tmp_path / "link").symlink_to(ws)
    # the attacker's "/x/other/../ws", and mine: a symlink to ws
    _header(session, workspace=str(other / ".." / "ws") if spelling == "dotdot" else str(tmp_path / "link"))
    assert CliRunner().invoke(main, ["approve", str(session), "--all"]).exit_code == 0
    refused = _resume(tmp_path, ["resume", str(session), "-w", str(other)])
    assert refused.exit_code == 1 and (ws / "marker.txt").exists()
    [line] = [t for t in refused.output.splitlines() if t.startswith("error:")]
    assert line == (f"error: SessionError: session {session} works in {str(ws.resolve())!a}, not in "
                    f"{str(other.resolve())!a}; nothing was run: continue it there (kimik3 resume {session}, or "
                    f"with -w {ws.resolve()})")
    fixes = line.split("continue it there (")[1].removesuffix(")").split(", or with ")
    argv = ["resume", str(session)] if fix == 0 else ["resume", str(session), *shlex.split(fixes[1])]
    assert shlex.split(fixes[0])[1:] == ["resume", str(session)]
    monkeypatch.chdir(other)
    done = _resume(tmp_path, argv)  # the printed fix, run as printed (plus the engine)
    assert done.exit_code == 0, done.output
    assert not (ws / "marker.txt").exists() and (other / "marker.txt").exists()


@pytest.mark.parametrize(("value", "shown"), [("ws", "'ws'"), (5, "5"), (None, None)])
def test_a_malformed_or_missing_workspace_is_refused_unless_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  value: object, shown: str | None) -> None:
    session, ws, other = deferred(tmp_path)
    assert "sandbox" in SessionLog.read(session).header  # a coding harness's session
    _header(session, workspace=value)  # relative (the attacker's), not text (the marker case), none
    assert CliRunner().invoke(main, ["approve", str(session), "--all"]).exit_code == 0
    monkeypatch.chdir(other)  # never run in whatever folder this is
    out = _resume(tmp_path, ["resume", str(session)])
    assert out.exit_code == 1
    [line] = [t for t in out.output.splitlines() if t.startswith("error:")]
    if shown is not None:
        assert line == (f"error: SessionError: {session}:1: malformed session header: \"workspace\" must be an "
                        f"absolute folder path, got {shown}")
    else:
        assert line == (f"error: SessionError: session {session} records no workspace (written before sessions "
                        f"recorded theirs); nothing was run: give the folder it worked in (kimik3 resume "
                        f"{session} -w FOLDER)")
        done = _resume(tmp_path, ["resume", str(session), "-w", str(ws)])  # only an explicit -w runs it
        assert done.exit_code == 0, done.output
        assert not (ws / "marker.txt").exists()
    assert (other / "marker.txt").exists()


def test_a_recorded_workspace_that_is_gone_is_one_typed_line(tmp_path: Path) -> None:
    session, ws, other = deferred(tmp_path)
    assert CliRunner().invoke(main, ["approve", str(session), "--all"]).exit_code == 0
    gone = tmp_path / "gone"
    ws.rename(gone)
    out = _resume(tmp_path, ["resume", str(session)])
    assert out.exit_code == 1
    assert out.output.splitlines() == [f"error: SessionError: session {session} works in {str(ws)!a}, which is no "
                                       "longer a folder; nothing was run"]
    (tmp_path / "file").write_text("x")  # mine: the path is a file now
    _header(session, workspace=str(tmp_path / "file"))
    out = _resume(tmp_path, ["resume", str(session), "-w", str(other)])
    assert out.output.splitlines() == [f"error: SessionError: session {session} works in "
                                       f"{str(tmp_path / 'file')!a}, which is no longer a folder; nothing was run"]
    assert (gone / "marker.txt").exists() and (other / "marker.txt").exists()


def test_a_cli_resume_with_checkpoints_opens_locks_and_reads_the_session_once(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 on the CLI's path (the coding harness, checkpoints always on): before, the CLI
    read the session unlocked for its workspace, then the run locked and read it, then the
    checkpoints read it again to count turns (3 opens); now the run's writer is opened first and
    everything reads its log."""
    import builtins
    import fcntl
    import io
    import os

    session, ws, other = deferred(tmp_path)
    assert CliRunner().invoke(main, ["approve", str(session), "--all"]).exit_code == 0
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([answer("cleaned")]))
    counts = {"open": 0, "lock": 0, "read": 0}
    real_open, real_io_open, real_flock, real_seek = os.open, io.open, fcntl.flock, os.lseek

    def ours(path: object) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.abspath(path) == str(session)

    def counting_open(path: object, *args: object, **kwargs: object) -> int:
        counts["open"] += ours(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def counting_io_open(path: object, *args: object, **kwargs: object) -> object:
        counts["open"] += ours(path)
        return real_io_open(path, *args, **kwargs)  # type: ignore[call-overload]

    def counting_flock(fd: int, op: int) -> None:
        counts["lock"] += bool(op & fcntl.LOCK_EX) and os.path.samefile(f"/proc/self/fd/{fd}", session)
        real_flock(fd, op)

    def counting_seek(fd: int, pos: int, how: int) -> int:
        if (pos, how) == (0, os.SEEK_SET) and os.path.samefile(f"/proc/self/fd/{fd}", session):
            counts["read"] += 1
        return real_seek(fd, pos, how)

    monkeypatch.chdir(other)
    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_io_open)
    monkeypatch.setattr(builtins, "open", counting_io_open)
    monkeypatch.setattr(fcntl, "flock", counting_flock)
    monkeypatch.setattr(os, "lseek", counting_seek)
    out = CliRunner().invoke(main, ["resume", str(session), "--script", str(script), "--plain", "--sandbox", "none"])
    monkeypatch.undo()
    assert out.exit_code == 0, out.output
    assert not (ws / "marker.txt").exists() and (other / "marker.txt").exists()
    assert '{"checkpoint": ' in session.read_text()  # the checkpoints were on, and counted their turn
    assert counts == {"open": 1, "lock": 1, "read": 1}
