"""Deferred approvals in one process: Defer() stops the run cleanly, the journal in the session,
Agent.resume(approvals=...) with Allow / Deny / Edit, what is refused (and that nothing is written
then), the journal's validation, ``kimik3 show`` and ``kimik3 approve``; and ``resume`` without a
task on an answered session ("nothing to do")."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from kimik3 import Agent, Allow, Defer, Deny, Edit, ScriptedEngine, SessionError, UserError, tool
from kimik3.agents import (
    PendingCall,
    format_session,
    load_session,
    pending_approvals,
    read_session_records,
    record_approvals,
)
from kimik3.formats.k3 import render_output
from kimik3.types import AssistantMessage, Message, ToolMessage, message_text

WRITTEN: list[str] = []


@tool
def write_line(text: str) -> str:
    """Append a line.

    Args:
        text: the line.
    """
    WRITTEN.append(text)
    return f"wrote {text}"


@tool
def look(path: str) -> str:
    """Look at a path.

    Args:
        path: the path.
    """
    return f"seen {path}"


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "go", "tool_calls": [
        {"id": f"{name}:{i}", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(pairs)]})


TURN = calls(("look", {"path": "a"}), ("write_line", {"text": "hello"}))


def echo(messages: list[Message]) -> str:
    """The model after the tools: an answer naming the last tool result."""
    last = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    return f"saw: {message_text(last.content)}"


def defer_writes(call: PendingCall) -> Allow | Defer:
    return Defer() if call.name == "write_line" else Allow()


@pytest.fixture(autouse=True)
def _clear() -> None:
    WRITTEN.clear()


def deferred_session(tmp_path: Path, turn: str = TURN) -> tuple[Path, list[PendingCall]]:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([turn])
    agent = Agent(tools=[look, write_line], engine=engine, approval=defer_writes)
    result = anyio.run(lambda: agent.run("go", session=session))
    assert result.stop_reason == "approval_required"
    return session, result.pending_approvals


def resumed(session: Path, approvals: dict[str, Any] | None = None, task: str | None = None) -> Any:
    agent = Agent(tools=[look, write_line], engine=ScriptedEngine(echo), approval=defer_writes)
    return anyio.run(lambda: agent.resume(session, task, approvals=approvals))


def tool_results(session: Path) -> list[tuple[str | None, str]]:
    return [(m.name, str(m.content)) for m in load_session(session) if isinstance(m, ToolMessage)]


def test_defer_stops_the_run_cleanly_with_the_pending_call_recorded(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([TURN, "never asked"])
    agent = Agent(tools=[look, write_line], engine=engine, approval=defer_writes)
    result = anyio.run(lambda: agent.run("go", session=session))
    assert result.stop_reason == "approval_required" and result.output is None
    assert result.turns == 1 and engine.remaining == 1  # no model call after the deferring turn
    [pending] = result.pending_approvals
    assert (pending.name, pending.arguments) == ("write_line", {"text": "hello"})
    assert WRITTEN == []
    assert tool_results(session) == [("look", "seen a")]  # the allowed call of the turn ran, recorded
    assert result.degraded and not result.issues and result.failed_calls == 0
    journal = [r.journal for r in read_session_records(session) if r.journal is not None]
    look_id = next(j.body["call_id"] for j in journal if j.kind == "tool_finished")
    assert [(j.kind, j.body) for j in journal] == [  # look's end journaled as it ended, write_line's deferral
        ("deferred", {"call_id": pending.id, "name": "write_line", "arguments": {"text": "hello"}}),
        ("tool_finished", {"call_id": look_id, "name": "look"})]
    assert pending_approvals(session) == [pending]


def test_a_resume_without_the_approved_calls_tool_is_refused_and_uses_nothing_up(tmp_path: Path) -> None:
    """An approved call whose tool the resuming agent lacks (an MCP server not given again) is not
    run as "unknown tool": the resume is refused, nothing of the call is recorded, and a resume
    with the tool still runs it once."""
    session, [pending] = deferred_session(tmp_path)
    record_approvals(session, {pending.id: Allow()})
    before = session.read_bytes()
    lacking = Agent(tools=[look], engine=ScriptedEngine(echo), approval=defer_writes)
    with pytest.raises(UserError, match=(f"^the session's approved call '{pending.id}' to 'write_line' waits to run, but "
                                         "this run has no tool of that name: resume with the tools of the run that "
                                         r"stopped \(kimik3 resume: the same --mcp options\); nothing was run$")):
        anyio.run(lambda: lacking.resume(session))
    after = session.read_bytes()
    assert after.startswith(before) and b"tool_started" not in after[len(before):]
    assert b"unknown tool" not in after and WRITTEN == []
    result = resumed(session)
    assert result.output == "saw: wrote hello" and WRITTEN == ["hello"]


def test_resume_with_allow_runs_the_call_once_and_goes_on(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    result = resumed(session, {pending.id: Allow()})
    assert result.stop_reason == "completed" and result.output == "saw: wrote hello"
    assert WRITTEN == ["hello"]
    assert tool_results(session) == [("look", "seen a"), ("write_line", "wrote hello")]
    kinds = [r.journal.kind for r in read_session_records(session) if r.journal is not None]
    assert kinds == ["deferred", "tool_finished", "decision", "tool_started", "tool_finished"]
    [decision] = [r.body for r in read_session_records(session) if r.kind == "decision"]
    assert decision == {"call_id": pending.id, "decision": "allow",  # bound to what it approved: sha256 of the
                        "sha256": hashlib.sha256(  # canonical JSON of [id, tool, arguments]
                            f'["{pending.id}", "write_line", {{"text": "hello"}}]'.encode()).hexdigest()}
    with pytest.raises(UserError, match=f"no call '{pending.id}' awaits approval in .*; awaiting: none"):
        resumed(session, {pending.id: Allow()})  # the same approval again: nothing runs twice
    with pytest.raises(UserError, match="nothing to do: the conversation ends with the agent's answer"):
        resumed(session)
    assert WRITTEN == ["hello"]


def test_a_denied_call_gets_an_error_result_the_model_sees(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    result = resumed(session, {pending.id: Deny("not on a Friday")})
    assert WRITTEN == []
    assert result.output == "saw: Error: the user denied this call: not on a Friday"
    assert result.failed_calls == 1
    assert result.issues == ["turn 0: the call to 'write_line' failed: the user denied this call: not on a Friday"]


def test_an_edited_call_runs_with_the_new_arguments_and_says_so(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    result = resumed(session, {pending.id: Edit({"text": "bye"})})
    assert WRITTEN == ["bye"]
    assert result.output == 'saw: [the user edited the arguments to {"text": "bye"}]\nwrote bye'


def test_undecided_calls_keep_waiting_and_nothing_runs(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    before = session.read_bytes()
    engine = ScriptedEngine(["never"])
    again = anyio.run(Agent(tools=[look, write_line], engine=engine).resume, session)  # no hook at all
    assert again.stop_reason == "approval_required" and again.pending_approvals == [pending]
    assert again.turns == 0 and engine.calls == [] and WRITTEN == []
    assert b'"tool_started"' not in session.read_bytes()[len(before):]
    # a task cannot come before the waiting calls are decided: refused before anything is written
    written = session.read_bytes()
    with pytest.raises(UserError, match=rf"1 tool call\(s\) of this session await approval \('{pending.id}'\)"):
        resumed(session, task="something else")
    assert session.read_bytes() == written


def test_one_call_decided_runs_the_other_keeps_waiting(tmp_path: Path) -> None:
    session, pending = deferred_session(tmp_path, calls(("write_line", {"text": "1"}), ("write_line", {"text": "2"})))
    first, second = pending
    result = resumed(session, {first.id: Allow()})
    assert result.stop_reason == "approval_required" and result.pending_approvals == [second]
    assert WRITTEN == ["1"]
    result = resumed(session, {second.id: Allow()})
    assert result.stop_reason == "completed" and WRITTEN == ["1", "2"]


def test_bad_approvals_are_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    before = session.read_bytes()
    with pytest.raises(UserError, match=rf"no call 'nope' awaits approval in .*; awaiting: '{pending.id}'"):
        record_approvals(session, {"nope": Allow()})
    with pytest.raises(UserError, match=r"must be Allow\(\), Deny\(reason\) or Edit\(arguments\), got Defer\(\)"):
        record_approvals(session, {pending.id: Defer()})  # type: ignore[dict-item]
    with pytest.raises(UserError, match="must be a JSON object, got list"):
        record_approvals(session, {pending.id: Edit([1])})  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"Edit\(arguments\) beyond the JSON limits"):
        record_approvals(session, {pending.id: Edit({"x": float("nan")})})
    with pytest.raises(UserError, match="must be a mapping"):
        record_approvals(session, [pending.id])  # type: ignore[arg-type]
    look_id = next(m.tool_call_id for m in load_session(session) if isinstance(m, ToolMessage))
    assert look_id is not None
    with pytest.raises(UserError, match=f"no call '{look_id}' awaits"):  # the allowed call is no pending one
        record_approvals(session, {look_id: Allow()})
    assert session.read_bytes() == before
    assert record_approvals(session, {pending.id: Deny("no")}) == [pending]
    assert record_approvals(session, {pending.id: Deny("no")}) == []  # the same again: a no-op
    with pytest.raises(UserError, match=rf"call '{pending.id}' of .* was decided already \(deny, line \d+\); "
                                        "a decision is final"):
        record_approvals(session, {pending.id: Allow()})
    assert session.read_bytes().count(b'{"decision": ') == 1


def test_defer_needs_a_session(tmp_path: Path) -> None:
    agent = Agent(tools=[look, write_line], engine=ScriptedEngine([TURN]), approval=defer_writes)
    with pytest.raises(UserError, match=r"the approval hook deferred a call \(Defer\(\)\), which needs a session"):
        anyio.run(agent.run, "go")
    assert WRITTEN == []


@pytest.mark.parametrize(("record", "error"), [
    ({"decision": {"call_id": "{look}", "decision": "allow"}}, "call '{look}' was never deferred"),
    ({"deferred": {"call_id": "ghost", "name": "x", "arguments": {}}}, "no call 'ghost' in the last turn"),
    ({"tool_started": {"call_id": "{write}", "name": "write_line"}}, "call '{write}' started without an approval"),
    ({"decision": {"call_id": "{write}", "decision": "maybe"}}, "unknown decision 'maybe'"),
    ({"decision": {"call_id": "{write}", "decision": "deny", "reason": 3}}, "a denial's reason must be text"),
    ({"deferred": {"call_id": "{look}", "name": "write_line", "arguments": {}}}, "call '{look}' is to 'look'"),
    ({"decision": {"decision": "allow"}}, "a decision record needs a call_id"),
])
def test_a_journal_record_that_does_not_fit_is_refused_naming_its_line(tmp_path: Path, record: dict[str, Any],
                                                                      error: str) -> None:
    session, [pending] = deferred_session(tmp_path)
    look_id = next(m.tool_call_id for m in load_session(session) if isinstance(m, ToolMessage))
    text = json.dumps(record).replace("{look}", str(look_id)).replace("{write}", pending.id)
    lines = session.read_text().splitlines()
    session.write_text("\n".join([*lines, text]) + "\n")
    message = error.replace("{look}", str(look_id)).replace("{write}", pending.id)
    with pytest.raises(SessionError, match=rf"s\.jsonl:{len(lines) + 1}: not a valid \w+ record: {message}"):
        pending_approvals(session)
    with pytest.raises(SessionError, match=rf":{len(lines) + 1}: "):
        resumed(session, {pending.id: Allow()})
    assert WRITTEN == []


@pytest.mark.parametrize(("change", "error"), [
    ({"arguments": {"text": "rm -rf ~/important"}},
     r'the arguments \{"text": "rm -rf ~/important"\} are not those of call \'{write}\' \(\{"text": "hello"\}\)'),
    ({"arguments": {"text": "hello", "more": 1}}, r"the arguments .* are not those of call"),
    ({"arguments": {"text": ["hello"]}}, r"the arguments .* are not those of call"),
    ({"name": "look"}, r"call '{write}' is to 'write_line', not 'look'"),
    ({"call_id": "write_line:7"}, r"no call 'write_line:7' in the last turn"),
    ({"arguments": "hello"}, r"the arguments must be a JSON object"),
])
def test_a_deferred_record_edited_to_say_other_than_the_call_is_refused(tmp_path: Path, change: dict[str, Any],
                                                                         error: str) -> None:
    """The person is shown, and resume runs, only the assistant message's call: a ``deferred``
    record that says otherwise (the attack: it says ``hello`` while the call writes something
    else) is a SessionError naming its line, for pending_approvals, kimik3 show / approve and
    resume alike, and nothing runs."""
    from kimik3.cli import main

    session, [pending] = deferred_session(tmp_path)
    lines = session.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.startswith('{"deferred"'))
    record = json.loads(lines[number - 1])
    record["deferred"].update(change)
    lines[number - 1] = json.dumps(record)
    session.write_text("\n".join(lines) + "\n")
    message = rf"s\.jsonl:{number}: not a valid deferred record: " + error.replace("{write}", pending.id)
    with pytest.raises(SessionError, match=message):
        pending_approvals(session)
    with pytest.raises(SessionError, match=message):
        format_session(session)
    with pytest.raises(SessionError, match=message):
        record_approvals(session, {pending.id: Allow()})
    with pytest.raises(SessionError, match=message):
        resumed(session, {pending.id: Allow()})
    out = CliRunner().invoke(main, ["approve", str(session)])
    assert out.exit_code == 1
    assert f"s.jsonl:{number}: not a valid deferred record" in out.output
    assert "approved" not in out.output
    assert session.read_text().splitlines() == lines  # nothing recorded
    assert WRITTEN == []


def test_a_second_deferred_record_for_a_call_is_refused(tmp_path: Path) -> None:
    """Even one saying the same thing: a call is deferred once; a duplicate would silently replace it."""
    session, [pending] = deferred_session(tmp_path)
    lines = session.read_text().splitlines()
    record = next(line for line in lines if line.startswith('{"deferred"'))
    session.write_text("\n".join([*lines, record]) + "\n")
    with pytest.raises(SessionError, match=rf"s\.jsonl:{len(lines) + 1}: not a valid deferred record: "
                                           rf"call '{pending.id}' was deferred already"):
        pending_approvals(session)
    with pytest.raises(SessionError, match=rf"s\.jsonl:{len(lines) + 1}: "):
        resumed(session, {pending.id: Allow()})
    assert WRITTEN == []


def test_a_deferred_record_written_otherwise_but_equal_is_accepted_and_an_edit_runs_what_was_given(
        tmp_path: Path) -> None:
    """The record is compared as JSON (its spacing and key order do not count); an Edit runs with
    the arguments the person gave, not the call's."""
    session, [pending] = deferred_session(tmp_path)
    lines = session.read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if line.startswith('{"deferred"'))
    body = json.loads(lines[number])["deferred"]
    lines[number] = json.dumps({"deferred": dict(reversed(list(body.items())))}, separators=(",", ":"))
    session.write_text("\n".join(lines) + "\n")
    assert pending_approvals(session) == [PendingCall(pending.id, "write_line", {"text": "hello"})]
    resumed(session, {pending.id: Edit({"text": "edited"})})
    assert WRITTEN == ["edited"]


def test_an_approved_call_started_without_a_result_is_answered_interrupted_never_run_again(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    record_approvals(session, {pending.id: Allow()})
    with session.open("a") as f:  # as a kill -9 inside the tool leaves it
        f.write(json.dumps({"tool_started": {"call_id": pending.id, "name": "write_line"}}) + "\n")
    result = resumed(session)
    text = ("Error: the run stopped while this call was running and its result was lost; it may have done some "
            "or all of its work: check before calling it again")
    assert WRITTEN == [] and result.output == f"saw: {text}"
    assert result.failed_calls == 1
    assert result.issues == [f"turn 0: the approved call to 'write_line' ({pending.id}) was interrupted before its "
                             "result was recorded; it was not run again"]


def test_the_journal_belongs_to_its_turn_a_later_turn_with_the_same_id_starts_afresh(tmp_path: Path) -> None:
    """Call ids repeat across turns (K3's ``write_line:0``): a decision of turn 1 never runs a
    call of turn 2 with the same id; that one, left without a result, is a crash's orphan."""
    call = {"id": "write_line:0", "type": "function", "function": {"name": "write_line",
                                                                  "arguments": '{"text": "again"}'}}
    lines: list[dict[str, Any]] = [
        {"kimik3_session": 1, "created": 0, "tools": ["write_line"]},
        {"message": {"role": "user", "content": "go"}},
        {"message": {"role": "assistant", "content": "", "tool_calls": [call]}},
        {"deferred": {"call_id": "write_line:0", "name": "write_line", "arguments": {"text": "again"}}},
        {"decision": {"call_id": "write_line:0", "decision": "allow"}},
        {"tool_started": {"call_id": "write_line:0", "name": "write_line"}},
        {"message": {"role": "tool", "content": "wrote again", "tool_call_id": "write_line:0", "name": "write_line"}},
        {"message": {"role": "assistant", "content": "", "tool_calls": [call]}},
    ]
    session = tmp_path / "s.jsonl"
    session.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert pending_approvals(session) == []
    with pytest.raises(UserError, match="no call 'write_line:0' awaits approval"):
        record_approvals(session, {"write_line:0": Allow()})
    result = resumed(session)
    assert WRITTEN == []
    assert result.output == ("saw: Error: the run stopped before this call's result was recorded; whether it ran, "
        "and how far, is unknown: check before calling it again")


def test_resume_without_a_task_on_an_answered_session_is_nothing_to_do(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    anyio.run(lambda: Agent(engine=ScriptedEngine(["the answer"])).run("hi", session=session))
    before = session.read_bytes()
    engine = ScriptedEngine(["a second answer"])
    with pytest.raises(UserError, match=r"^nothing to do: the conversation ends with the agent's answer; pass a task "
                                        r"to continue it$"):
        anyio.run(Agent(engine=engine).resume, session)
    assert engine.calls == [] and session.read_bytes() == before  # no model call, nothing appended
    with pytest.raises(UserError, match="nothing to do"):  # the same rule for run(messages=...)
        anyio.run(lambda: Agent(engine=engine).run(messages=load_session(session)))
    result = anyio.run(Agent(engine=engine).resume, session, "and now?")  # with a task it goes on
    assert result.output == "a second answer"
    assert [type(m).__name__ for m in load_session(session)] == [
        "UserMessage", "AssistantMessage", "UserMessage", "AssistantMessage"]


def test_show_lists_the_journal_and_the_calls_awaiting_a_decision(tmp_path: Path) -> None:
    session, [pending] = deferred_session(tmp_path)
    text = format_session(session)
    assert f'--- deferred for approval: write_line({{"text": "hello"}})  id={pending.id}\n' in text
    assert text.endswith(f"awaiting approval: 1 call (kimik3 approve {session} [--allow ID] [--deny ID] [--edit ID "
                         f"JSON] [--all], then kimik3 resume {session})\n"
                         f'    write_line({{"text": "hello"}})  id={pending.id}\n')
    record_approvals(session, {pending.id: Edit({"text": "x"})})
    text = format_session(session)
    assert f'--- approved with edited arguments {{"text": "x"}}: id={pending.id}\n' in text
    assert "awaiting approval" not in text


def test_cli_approve_then_resume_runs_the_approved_call(tmp_path: Path) -> None:
    from kimik3.cli import main

    session, pending = deferred_session(tmp_path, calls(("write_line", {"text": "1"}), ("write_line", {"text": "2"}),
                                                        ("write_line", {"text": "3"})))
    ids = [p.id for p in pending]
    runner = CliRunner()
    bad = runner.invoke(main, ["approve", str(session), "--deny", "nope"])
    assert bad.exit_code == 2 and f"no call 'nope' awaits approval in {session}; awaiting: {', '.join(ids)}" \
        in bad.output
    out = runner.invoke(main, ["approve", str(session), "--deny", ids[0], "--reason", "no", "--edit", ids[1],
                               '{"text": "two"}', "--all"])
    assert out.exit_code == 0, out.output
    assert out.output == (f'denied: write_line {{"text": "1"}}  id={ids[0]}\n'
                          f'edited to {{"text": "two"}}: write_line {{"text": "2"}}  id={ids[1]}\n'
                          f'approved: write_line {{"text": "3"}}  id={ids[2]}\n'
                          f"continue with: kimik3 resume {session}\n")
    none = runner.invoke(main, ["approve", str(session)])
    assert none.exit_code == 1
    assert none.output.splitlines()[-1] == f"error: UserError: no tool call awaits approval in {session}"
    result = resumed(session)
    # the two approved calls run concurrently (either may write first); results stay in call order
    assert result.stop_reason == "completed" and sorted(WRITTEN) == ["3", "two"]
    assert [text for _, text in tool_results(session)] == [
        "Error: the user denied this call: no", '[the user edited the arguments to {"text": "two"}]\nwrote two',
        "wrote 3"]


def test_cli_resume_of_a_waiting_session_says_what_to_do(tmp_path: Path) -> None:
    from kimik3.cli import main

    session, [pending] = deferred_session(tmp_path)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["unused"]))
    out = CliRunner().invoke(main, ["resume", str(session), "--script", str(script), "--plain", "--sandbox", "none",
                                    "--workspace", str(tmp_path)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert ("stopped: approval_required (tool calls await a person's decision: kimik3 approve SESSION, then "
            "kimik3 resume SESSION)") in lines
    assert f'awaiting approval: write_line {{"text": "hello"}}  id={pending.id}' in lines
    # the session lies in its workspace, so resume takes no engine from it: the line gives it again
    assert lines[-2:] == [f"decide with: kimik3 approve {session}",
                          f"continue with: kimik3 resume {session} --script {script}"]


def test_an_assistant_message_replayed_exactly_after_the_deferral(tmp_path: Path) -> None:
    """The resumed prompt holds the deferring turn's assistant message as received, and both
    results (the allowed one from the first process, the approved one from the second)."""
    session, [pending] = deferred_session(tmp_path)
    engine = ScriptedEngine(echo)
    anyio.run(lambda: Agent(tools=[look, write_line], engine=engine).resume(session, approvals={pending.id: Allow()}))
    sent = engine.calls[0].request.messages
    assistant = next(m for m in sent if isinstance(m, AssistantMessage))
    assert assistant.reasoning_content == "go" and [c.function.name for c in assistant.tool_calls or ()] == [
        "look", "write_line"]
    assert [(m.name, m.content) for m in sent if isinstance(m, ToolMessage)] == [
        ("look", "seen a"), ("write_line", "wrote hello")]


async def test_a_turn_ended_by_a_budget_whose_summary_failed_can_be_continued(tmp_path: Path) -> None:
    # found by a40c (a chat's --max-usd turn): the budget's note (a system message) after the
    # tool results hid the turn's calls from the journal's reader, so the next run of the session
    # was a SessionError ("no call ... in the last turn") for a journal that was right
    from kimik3 import Budgets, EngineError

    session = tmp_path / "s.jsonl"
    with pytest.raises(EngineError, match="ran out of responses"):  # the summary turn has no answer
        await Agent(tools=[look], engine=ScriptedEngine([calls(("look", {"path": "a"}))]),
                    budgets=Budgets(turns=1)).run("go", session=session)
    lines = [json.loads(line) for line in session.read_text().splitlines()]
    assert [next(iter(r)) for r in lines][-3:] == ["tool_finished", "message", "message"]
    assert lines[-1]["message"]["role"] == "system"  # the budget's note ends the file
    result = await Agent(tools=[look], engine=ScriptedEngine(["done"])).resume(session, "again")
    assert result.output == "done"
