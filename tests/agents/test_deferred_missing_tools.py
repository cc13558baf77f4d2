"""A resume that lacks the tool of an approved call is refused naming every such call, and
nothing runs, not even the calls whose tools are there; a denied call is never refused: its
denial is its result with or without the tool (attack 4 on ``_refuse_missing_tools``)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from kimik3 import Agent, Allow, Defer, Deny, ScriptedEngine, UserError, tool
from kimik3.agents import PendingCall, load_session, record_approvals
from tests.agents.test_deferred import WRITTEN, calls, deferred_session, echo, look, tool_results, write_line

SEEN: list[str] = []


@tool
def peek(path: str) -> str:
    """Look at a path, counted.

    Args:
        path: the path.
    """
    SEEN.append(path)
    return f"peeked {path}"


@tool
def srv_write_line(text: str) -> str:
    """write_line under a new MCP prefix (the server given as srv=...).

    Args:
        text: the line.
    """
    WRITTEN.append(text)
    return f"wrote {text}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    WRITTEN.clear()
    SEEN.clear()


def refusal(*parts: str) -> str:
    one = len(parts) == 1
    return re.escape(f"the session's {' and '.join(parts)} {'waits' if one else 'wait'} to run, but this run has no "
                     f"tool of {'that name' if one else 'those names'}: resume with the tools of the run that stopped "
                     "(kimik3 resume: the same --mcp options); nothing was run")


@pytest.mark.parametrize("reason", ["not today", None])
def test_a_denied_call_without_its_tool_gets_the_denial_not_unknown_tool(tmp_path: Path, reason: str | None) -> None:
    session, [pending] = deferred_session(tmp_path)
    record_approvals(session, {pending.id: Deny(reason) if reason else Deny()})
    lacking = Agent(tools=[look], engine=ScriptedEngine(echo))
    result = anyio.run(lambda: lacking.resume(session))
    denial = f"Error: the user denied this call: {reason or 'denied by the user'}"
    assert tool_results(session) == [("look", "seen a"), ("write_line", denial)]
    assert (result.stop_reason, result.output, WRITTEN) == ("completed", f"saw: {denial}", [])


def waiting_both(tmp_path: Path) -> tuple[Path, list[PendingCall]]:
    """A turn calling peek and write_line, both deferred, then both approved."""
    session = tmp_path / "s.jsonl"
    agent = Agent(tools=[peek, write_line], engine=ScriptedEngine([calls(("peek", {"path": "a"}),
                                                                          ("write_line", {"text": "hi"}))]),
                  approval=lambda call: Defer())
    result = anyio.run(lambda: agent.run("go", session=session))
    record_approvals(session, {p.id: Allow() for p in result.pending_approvals})
    return session, result.pending_approvals


def test_two_approved_calls_one_tool_missing_runs_neither(tmp_path: Path) -> None:
    session, [peeked, written] = waiting_both(tmp_path)
    before = session.read_bytes()
    with pytest.raises(UserError, match=f"^{refusal(f'approved call {written.id!r} to {written.name!r}')}$"):
        anyio.run(lambda: Agent(tools=[peek], engine=ScriptedEngine(echo)).resume(session))
    after = session.read_bytes()[len(before):]
    assert b"tool_started" not in after and (SEEN, WRITTEN) == ([], [])  # peek's tool was there: not run either
    # variant: both tools missing, both named in one line
    both = refusal(f"approved call {peeked.id!r} to {peeked.name!r}", f"approved call {written.id!r} to {written.name!r}")
    with pytest.raises(UserError, match=f"^{both}$"):
        anyio.run(lambda: Agent(tools=[look], engine=ScriptedEngine(echo)).resume(session))
    result = anyio.run(lambda: Agent(tools=[peek, write_line], engine=ScriptedEngine(echo)).resume(session))
    assert (result.output, SEEN, WRITTEN) == ("saw: wrote hi", ["a"], ["hi"])  # each ran once, decisions kept


def test_a_tool_renamed_by_a_new_prefix_is_missing_not_guessed(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    record_approvals(session, {pending.id: Allow()})
    history = load_session(session)
    renamed = Agent(tools=[look, srv_write_line], engine=ScriptedEngine(echo))
    with pytest.raises(UserError, match=f"^{refusal(f'approved call {pending.id!r} to {pending.name!r}')}$"):
        anyio.run(lambda: renamed.resume(session))
    assert WRITTEN == [] and load_session(session) == history  # nothing declared or answered (run_start aside)
