"""Deferred approvals across real processes: a run defers a call and exits; other processes
approve and resume it; ``kill -9`` at each step in between. The approved call's side effect (a
line appended to a file) is counted on disk: exactly once, never lost, never twice.

Each process is ``deferred_worker.py`` (the SDK with a ScriptedEngine). A worker told to block
creates ``at-<point>`` and blocks opening a FIFO nobody writes to; the test waits for that file
(a generous limit against a hang, not a bound on anything) and kills the process there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kimik3.agents import load_session, pending_approvals, read_session_records
from kimik3.types import AssistantMessage, ToolMessage

WORKER = Path(__file__).with_name("deferred_worker.py")
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 120.0  # s: a hung worker fails the test instead of hanging it


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def worker(mode: str, session: Path, work: Path) -> Any:
    """Run the worker to its end; its JSON line."""
    proc = subprocess.run([sys.executable, str(WORKER), mode, str(session), str(work)], capture_output=True,
                          text=True, timeout=LIMIT, env=env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def killed_at(point: str, mode: str, session: Path, work: Path) -> None:
    """Run the worker until it blocks at ``point``, then ``kill -9`` it."""
    marker = work / f"at-{point}"
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, str(WORKER), mode, str(session), str(work), point],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        deadline = time.monotonic() + LIMIT
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, f"the worker never reached {point}"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=LIMIT)
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture
def work(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "gate")
    (tmp_path / "effects.txt").write_text("")
    return tmp_path


def effects(work: Path) -> list[str]:
    return (work / "effects.txt").read_text().splitlines()


def results_for(session: Path, name: str) -> list[str]:
    return [str(m.content) for m in load_session(session) if isinstance(m, ToolMessage) and m.name == name]


def kinds(session: Path) -> list[str]:
    """The approval journal and tool results of the session, in file order."""
    out = []
    for r in read_session_records(session):
        if r.journal is not None:
            out.append(r.journal.kind)
        elif isinstance(r.message, ToolMessage):
            out.append(f"result {r.message.name}")
    return out


def test_a_deferred_call_waits_across_processes_and_runs_once(work: Path) -> None:
    session = work / "s.jsonl"
    first = worker("run", session, work)
    assert first["stop_reason"] == "approval_required" and first["output"] is None
    [(call_id, name, arguments)] = first["pending"]
    assert (name, arguments) == ("write_line", {"text": "hello"})
    assert effects(work) == []  # deferred: not run
    assert results_for(session, "note") == ["noted a"]  # the allowed call of the turn ran, recorded
    assert kinds(session) == ["deferred", "tool_finished", "result note"]
    # another process resumes without a decision: still waiting, nothing runs
    assert worker("resume", session, work)["stop_reason"] == "approval_required"
    assert effects(work) == []
    # a third approves (records only), a fourth runs it
    assert worker("approve", session, work) == [call_id]
    assert pending_approvals(session) == []
    done = worker("resume", session, work)
    assert done == {"stop_reason": "completed", "output": "done after: wrote hello", "pending": []}
    assert effects(work) == ["hello"]
    assert kinds(session) == ["deferred", "tool_finished", "result note", "decision", "tool_started", "tool_finished",
                              "result write_line"]
    # a second resume: nothing to do, nothing runs again
    proc = subprocess.run([sys.executable, str(WORKER), "resume", str(session), str(work)], capture_output=True,
                          text=True, timeout=LIMIT, env=env())
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == ("kimik3.UserError: nothing to do: the conversation ends with the agent's "
                                            "answer; pass a task to continue it")
    assert effects(work) == ["hello"]


def test_kill_9_while_the_turn_that_defers_is_still_running(work: Path) -> None:
    """Killed after the deferral is recorded, while the turn's allowed call still runs: that
    call is answered as a crash's orphan, the deferred one still waits and runs once."""
    session = work / "s.jsonl"
    killed_at("note", "run", session, work)
    assert kinds(session) == ["deferred"]
    [pending] = pending_approvals(session)
    assert pending.name == "write_line"
    result = worker("resume-approve", session, work)
    assert result["stop_reason"] == "completed"
    assert effects(work) == ["hello"]
    assert results_for(session, "note") == [("Error: the run stopped before this call's result was recorded; whether it ran, "
        "and how far, is unknown: check before calling it again")]
    assert results_for(session, "write_line") == ["wrote hello"]


def test_kill_9_between_the_decision_and_the_run(work: Path) -> None:
    """Killed after ``resume(approvals=...)`` recorded the decision, before any tool ran: the
    next resume runs the call once, from the recorded decision."""
    session = work / "s.jsonl"
    worker("run", session, work)
    killed_at("run_start", "resume-approve", session, work)
    assert kinds(session) == ["deferred", "tool_finished", "result note", "decision"]
    assert effects(work) == []
    assert pending_approvals(session) == []  # decided: no longer waiting
    assert worker("resume", session, work)["stop_reason"] == "completed"
    assert effects(work) == ["hello"]
    assert kinds(session) == ["deferred", "tool_finished", "result note", "decision", "tool_started", "tool_finished",
                              "result write_line"]


def test_kill_9_while_the_approved_call_runs(work: Path) -> None:
    """Killed inside the approved call (after its side effect, before its result): it is never
    run again; the model reads that it was interrupted and decides."""
    session = work / "s.jsonl"
    worker("run", session, work)
    worker("approve", session, work)
    killed_at("tool", "resume", session, work)
    assert effects(work) == ["hello"]
    assert kinds(session)[-1] == "tool_started"
    interrupted = ("Error: the run stopped while this call was running and its result was lost; it may have done "
                   "some or all of its work: check before calling it again")
    result = worker("resume", session, work)
    assert result["output"] == f"done after: {interrupted}"  # the model read it, and decided
    assert effects(work) == ["hello"]
    assert results_for(session, "write_line") == [interrupted]
    again = subprocess.run([sys.executable, str(WORKER), "resume-approve", str(session), str(work)],
                           capture_output=True, text=True, timeout=LIMIT, env=env())
    assert again.returncode == 1 and "nothing to do" in again.stderr.splitlines()[-1]
    assert effects(work) == ["hello"]


def test_kill_9_after_the_result_before_the_next_model_call(work: Path) -> None:
    session = work / "s.jsonl"
    worker("run", session, work)
    killed_at("model", "resume-approve", session, work)
    assert effects(work) == ["hello"]
    assert results_for(session, "write_line") == ["wrote hello"]
    result = worker("resume", session, work)
    assert result["stop_reason"] == "completed" and result["output"] == "done after: wrote hello"
    assert effects(work) == ["hello"]
    assert kinds(session) == ["deferred", "tool_finished", "result note", "decision", "tool_started", "tool_finished",
                              "result write_line"]


def test_kill_9_after_a_call_finished_before_its_result_was_recorded(work: Path) -> None:
    """Issue 40: a turn's results are appended when its last call ends; killed while ``note``
    still runs, after ``write_line`` finished (its line is in the file). Before, resume told the
    model ``write_line`` "did not finish"; now its end was journaled (``tool_finished``) and the
    model reads that it finished and its result was lost; ``note``'s outcome is unknown. Nothing
    runs twice."""
    session = work / "s.jsonl"
    proc = subprocess.Popen([sys.executable, str(WORKER), "run-all", str(session), str(work), "note"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        deadline = time.monotonic() + LIMIT  # a generous limit against a hang, not a bound
        while not ((work / "at-note").exists() and session.exists() and b"tool_finished" in session.read_bytes()):
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "write_line never finished"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=LIMIT)
    assert effects(work) == ["hello"] and kinds(session) == ["tool_finished"]
    [finished] = [r.body for r in read_session_records(session) if r.kind == "tool_finished"]
    [turn] = [m for m in load_session(session) if isinstance(m, AssistantMessage)]
    assert finished == {"call_id": next(c.id for c in turn.tool_calls or () if c.function.name == "write_line"),
                        "name": "write_line"}
    result = worker("resume", session, work)
    assert result["stop_reason"] == "completed"
    assert effects(work) == ["hello"]  # never run again
    assert results_for(session, "write_line") == [
        "Error: this call finished, but the run stopped before its result was recorded, so the result is lost: "
        "check what it did before calling it again"]
    assert results_for(session, "note") == [
        "Error: the run stopped before this call's result was recorded; whether it ran, and how far, is unknown: "
        "check before calling it again"]
    assert "did not finish" not in session.read_text() and "before this call finished" not in session.read_text()


def test_a_second_writer_is_refused_while_a_resume_runs_the_call(work: Path) -> None:
    """Two processes resuming at once: the second is refused (the session's lock); the call
    runs once."""
    session = work / "s.jsonl"
    worker("run", session, work)
    worker("approve", session, work)
    marker = work / "at-tool"
    proc = subprocess.Popen([sys.executable, str(WORKER), "resume", str(session), str(work), "tool"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        deadline = time.monotonic() + LIMIT
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        other = subprocess.run([sys.executable, str(WORKER), "resume", str(session), str(work)],
                               capture_output=True, text=True, timeout=LIMIT, env=env())
        assert other.returncode == 1
        assert f"kimik3.SessionError: session {session} is in use by pid {proc.pid}" in other.stderr
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=LIMIT)
    assert effects(work) == ["hello"]
    assert kinds(session)[-1] == "tool_started"
