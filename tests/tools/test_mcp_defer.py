"""An MCP server's ``input_required`` result in an unattended run (no input handler) waits in the
session like a deferred approval (issue 43): the run stops with ``input_required``, the questions
are a journal record, ``Agent.resume(session, answers=...)`` records the answer bound to the exact
questions and replays the call with them as its ``inputResponses`` (against a real ``mcp`` 2.x
server, tests/tools/mcp_input_server.py, restarted between the runs as a new process would)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed")

from kimik3 import Agent, ScriptedEngine, SessionError, ToolMessage, UserError
from kimik3.agents import PendingInput, load_session, pending_inputs, record_answers
from kimik3.agents._inputs import input_digest
from kimik3.formats.k3 import render_output
from kimik3.tools.mcp import MCPServerStdio
from kimik3.types import Message, message_text

SERVER = str(Path(__file__).with_name("mcp_input_server.py"))
KEY = "kimik3-test-request-state-key-0123456789"  # the servers of one deployment share it
ASK = "__main__:ask_who"  # the SDK's key of the server's resolver (module:qualname)
QUESTION = {"method": "elicitation/create", "params": {
    "mode": "form", "message": "Whose name is the booking in Oslo under?",
    "requestedSchema": {"properties": {"name": {"title": "Name", "type": "string"}}, "required": ["name"],
                        "type": "object"}}}


def book(name: str = "book") -> str:
    return render_output({"reasoning_content": "book it", "tool_calls": [
        {"id": f"{name}:0", "function": {"name": name, "arguments": json.dumps({"city": "Oslo"})}}]})


BOOK = book()


def echo(messages: list[Message]) -> str:
    last = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    return f"saw: {message_text(last.content)}"


def agent(log: Path, engine: ScriptedEngine, key: str | None = KEY) -> Agent:
    server = MCPServerStdio(sys.executable, [SERVER, str(log)], env={"KIMIK3_TEST_STATE_KEY": key} if key else {},
                            name="inp", timeout=60, connect_timeout=120)  # no input_handler: unattended
    return Agent(tools=[server], engine=engine)


def records(session: Path, kind: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
    return [r[kind] for r in lines if kind in r]


def asked(tmp_path: Path) -> tuple[Path, PendingInput]:
    session = tmp_path / "s.jsonl"
    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine([BOOK])).run("book Oslo", session=session))
    assert (result.stop_reason, result.output, result.pending_approvals) == ("input_required", None, [])
    (pending,) = result.pending_inputs
    assert pending.id.startswith("call_")  # the engine's id of the model's call
    assert pending == PendingInput(pending.id, "book", {"city": "Oslo"}, "inp", {ASK: QUESTION}, pending.request_state)
    assert pending.request_state is not None and pending.request_state.startswith("v1.")  # the server's sealed state
    return session, pending


def test_an_unattended_question_stops_the_run_and_waits_in_the_session(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    assert records(session, "input_required") == [{
        "call_id": pending.id, "name": "book", "arguments": {"city": "Oslo"}, "server": "inp",
        "input_requests": {ASK: QUESTION}, "request_state": pending.request_state}]
    assert [m for m in load_session(session) if isinstance(m, ToolMessage)] == []  # no result: it waits
    assert records(session, "run_end")[-1]["stop_reason"] == "input_required"
    assert pending_inputs(session) == [pending]
    # a task while it waits is refused before anything is written
    size = session.stat().st_size
    with pytest.raises(UserError, match=rf"1 tool call\(s\) of this session await answers to an MCP server's "
                                        rf"questions \('{pending.id}'\): answer them first"):
        anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(["never"])).resume(session, "other task"))
    assert session.stat().st_size == size


def test_answer_then_resume_replays_the_call_with_the_answer(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    engine = ScriptedEngine(echo)
    result = anyio.run(lambda: agent(tmp_path / "log", engine).resume(
        session, answers={pending.id: {ASK: {"name": "Ada"}}}))
    assert (result.stop_reason, result.output, result.pending_inputs) == ("completed", "saw: booked Oslo for Ada", [])
    assert [(m.tool_call_id, m.content) for m in load_session(session) if isinstance(m, ToolMessage)] == [
        (pending.id, "booked Oslo for Ada")]
    assert records(session, "input_responses") == [{
        "call_id": pending.id, "input_responses": {ASK: {"action": "accept", "content": {"name": "Ada"}}},
        "sha256": input_digest(pending)}]
    assert records(session, "tool_started") == [{"call_id": pending.id, "name": "book"}]
    assert records(session, "tool_finished") == [{"call_id": pending.id, "name": "book"}]
    # answered once: a second resume has nothing to do
    with pytest.raises(UserError, match="nothing to do"):
        anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(["never"])).resume(session))


def test_a_resume_without_the_answered_calls_server_is_refused_and_the_answer_kept(tmp_path: Path) -> None:
    """Resumed without the MCP server (kimik3 resume without --mcp), the answered call is not run as
    "unknown tool", which would use the answer up: the resume is refused naming the server, and a
    resume with it replays the answer."""
    session, pending = asked(tmp_path)
    lacking = Agent(tools=[], engine=ScriptedEngine(echo))
    with pytest.raises(UserError, match=(f"^the session's answered call '{pending.id}' to 'book' \\(MCP server 'inp'\\) "
                                         "waits to run, but this run has no tool of that name")):
        anyio.run(lambda: lacking.resume(session, answers={pending.id: {ASK: {"name": "Ada"}}}))
    assert records(session, "tool_started") == [] and records(session, "input_responses") != []
    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(echo)).resume(session))
    assert (result.stop_reason, result.output) == ("completed", "saw: booked Oslo for Ada")


def test_a_declined_question_is_replayed_as_declined(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    record_answers(session, {pending.id: {ASK: None}})
    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(echo)).resume(session))
    assert result.output == "saw: not booked: decline"


def test_answers_not_for_exactly_the_questions_are_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    call = pending.id
    size = session.stat().st_size
    with pytest.raises(UserError) as e:
        record_answers(session, {call: {"who": {"name": "Ada"}}})
    assert str(e.value) == f"call '{call}' has no question 'who'; its questions: '{ASK}'"
    with pytest.raises(UserError, match=f"question '{ASK}' of call '{call}' is not answered"):
        record_answers(session, {call: {}})
    with pytest.raises(UserError, match=rf"no call 'book:9' awaits answers in .*; awaiting: '{call}'"):
        record_answers(session, {"book:9": {ASK: None}})
    with pytest.raises(UserError, match=f"the answer to question '{ASK}' of call '{call}' must be a dict"):
        record_answers(session, {call: {ASK: "Ada"}})  # type: ignore[dict-item]
    assert session.stat().st_size == size
    record_answers(session, {call: {ASK: {"name": "Ada"}}})
    record_answers(session, {call: {ASK: {"name": "Ada"}}})  # the same again: a no-op
    with pytest.raises(UserError, match=rf"call '{call}' of .* was answered already \(line \d+\); an answer is final"):
        record_answers(session, {call: {ASK: {"name": "Bob"}}})
    assert len(records(session, "input_responses")) == 1


def _edit(session: Path, kind: str, change: dict[str, Any]) -> int:
    lines = session.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if kind in record:
            record[kind].update(change)
            lines[i] = json.dumps(record)
            session.write_text("\n".join(lines) + "\n", encoding="utf-8")
            return i + 1
    raise AssertionError(kind)


@pytest.mark.parametrize(("change", "kind", "why"), [
    ({"input_requests": {ASK: {**QUESTION, "params": {**QUESTION["params"], "message": "Your card number?"}}}},
     "input_responses", "the answers are to other questions than call '{call}''s (book; sha256 "),
    ({"request_state": "v1.forged"}, "input_responses", "the answers are to other questions than call '{call}''s"),
    ({"arguments": {"city": "Paris"}}, "input_required",
     'the arguments {{"city": "Paris"}} are not those call \'{call}\' runs with'),
    ({"name": "quota"}, "input_required", "call '{call}' is to 'book', not 'quota'"),
])
def test_a_session_edited_after_the_answer_is_refused_and_nothing_runs(tmp_path: Path, change: dict[str, Any],
                                                                        kind: str, why: str) -> None:
    session, pending = asked(tmp_path)
    record_answers(session, {pending.id: {ASK: {"name": "Ada"}}})
    edited = _edit(session, "input_required", change)
    engine = ScriptedEngine(["never"])
    with pytest.raises(SessionError) as e:
        anyio.run(lambda: agent(tmp_path / "log", engine).resume(session))
    lines = session.read_text(encoding="utf-8").splitlines()
    line = edited if kind == "input_required" else 1 + next(i for i, t in enumerate(lines) if "input_responses" in t)
    assert str(e.value).startswith(f"{session}:{line}: not a valid {kind} record: {why.format(call=pending.id)}")
    assert engine.calls == [] and records(session, "tool_started") == []


def test_an_answer_shown_for_other_questions_is_refused(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    other = PendingInput(pending.id, pending.name, pending.arguments, pending.server, {ASK: QUESTION}, "v1.other")
    with pytest.raises(SessionError, match=f"the questions of call '{pending.id}' of .* changed after they were shown"):
        record_answers(session, {pending.id: {ASK: {"name": "Ada"}}}, shown=[other])
    assert records(session, "input_responses") == []


def test_a_server_restarted_without_its_key_refuses_the_state_and_the_model_reads_why(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(echo), key=None).resume(
        session, answers={pending.id: {ASK: {"name": "Ada"}}}))
    assert result.output == ("saw: Error: MCPServerError: the MCP server 'inp' answered with MCP error -32602: "
                             "Invalid or expired requestState")


def test_without_a_session_the_question_cannot_wait_and_the_call_fails_saying_so(tmp_path: Path) -> None:
    def model(messages: list[Message]) -> str:
        return echo(messages) if any(isinstance(m, ToolMessage) for m in messages) else BOOK

    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(model)).run("book Oslo"))
    assert result.stop_reason == "completed" and result.pending_inputs == [] and result.failed_calls == 1
    assert result.output == (
        "saw: Error: MCPServerError: the MCP server 'inp' asked for input ('Whose name is the booking in Oslo "
        "under?') and no one can answer: give MCPServer(input_handler=...), or run the agent with a session so "
        "that a person answers later (kimik3 run asks on the terminal)")


def test_cli_run_stops_answer_records_and_resume_replays(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main

    session, log, workspace = tmp_path / "s.jsonl", tmp_path / "log", tmp_path / "w"
    workspace.mkdir()
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([book("inp_book")]))  # the --mcp name is the tools' prefix
    server = f"inp={sys.executable} {SERVER} {log} --key={KEY}"  # stdin is no terminal here: unattended
    common = ["--script", str(script), "--plain", "--sandbox", "none", "--mcp", server, "--session", str(session)]
    out = CliRunner().invoke(main, ["run", "book Oslo", "--workspace", str(workspace), *common])
    assert out.exit_code == 0, out.output
    (pending,) = pending_inputs(session)
    lines = out.output.splitlines()
    assert ("stopped: input_required (an MCP server asked a question no one could answer here: kimik3 answer "
            "SESSION ID TEXT, then kimik3 resume SESSION)") in lines
    question = (f"inp asks (inp_book, id={pending.id}, question {ASK}): Whose name is the booking in Oslo under? "
                "[name*: string]")
    assert lines[lines.index(f'awaiting an answer: inp_book {{"city": "Oslo"}}  id={pending.id}') + 1] == (
        f"    {question}")  # the call whole (an answer lets it run), then its question
    assert lines[-2:] == [f"answer with: kimik3 answer {session} {pending.id} TEXT",
                          f"continue with: kimik3 resume {session}"]
    assert CliRunner().invoke(main, ["show", str(session)]).output.splitlines()[-3:] == [
        f"awaiting answers: 1 call (kimik3 answer {session} ID TEXT [--json JSON] [--decline], then kimik3 resume "
        f"{session})", f'    inp_book {{"city": "Oslo"}}  id={pending.id}', f"        {question}"]

    bad = CliRunner().invoke(main, ["answer", str(session), "nope", "Ada"])
    assert bad.exit_code == 2 and f"no call 'nope' awaits an answer in {session}; awaiting: {pending.id}" in bad.output
    out = CliRunner().invoke(main, ["answer", str(session), pending.id, "Ada"])
    assert out.exit_code == 0, out.output
    assert out.output == (f'inp_book {{"city": "Oslo"}}  id={pending.id}\n' f"    {question}\nanswered: {{\"{ASK}\": {{\"name\": \"Ada\"}}}}\n"
                          f"continue with: kimik3 resume {session}\n")
    shown = CliRunner().invoke(main, ["show", str(session)]).output.splitlines()
    assert f"--- waits for answers to the MCP server 'inp': id={pending.id}" in shown
    assert shown[-2] == f"--- answered: id={pending.id}" and not any(line.startswith("awaiting") for line in shown)
    none = CliRunner().invoke(main, ["answer", str(session), pending.id, "Bob"])
    assert none.exit_code == 1 and none.output.splitlines()[-1] == (
        f"error: UserError: no tool call awaits an answer in {session}")

    script.write_text(json.dumps(["the table is booked"]))
    out = CliRunner().invoke(main, ["resume", str(session), *common[:-2]])
    assert out.exit_code == 0, out.output
    assert [(m.tool_call_id, m.content) for m in load_session(session) if isinstance(m, ToolMessage)] == [
        (pending.id, "booked Oslo for Ada")]
    assert "the table is booked" in out.output


def _append(session: Path, kind: str, body: dict[str, Any]) -> int:
    with session.open("a", encoding="utf-8") as f:
        f.write(json.dumps({kind: body}) + "\n")
    return len(session.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize(("kind", "body", "why"), [
    ("tool_started", {"name": "book"}, "not a valid tool_started record: call '{call}' started again without answers "
                                       "to its questions"),
    ("tool_finished", {"name": "book"}, "not a valid tool_finished record: call '{call}' waits for answers and never "
                                        "started (tool_started)"),
    ("input_required", {"name": "book", "arguments": {"city": "Oslo"}, "server": "inp", "input_requests": {
        ASK: QUESTION}}, "not a valid input_required record: call '{call}' asked before and was not replayed"),
])
def test_a_journal_record_out_of_order_is_refused_naming_its_line(tmp_path: Path, kind: str, body: dict[str, Any],
                                                                 why: str) -> None:
    session, pending = asked(tmp_path)
    line = _append(session, kind, {"call_id": pending.id, **body})
    with pytest.raises(SessionError) as e:
        pending_inputs(session)
    assert str(e.value).startswith(f"{session}:{line}: {why.format(call=pending.id)}")


def test_a_replay_cut_by_a_crash_is_answered_interrupted_and_never_run_again(tmp_path: Path) -> None:
    session, pending = asked(tmp_path)
    record_answers(session, {pending.id: {ASK: {"name": "Ada"}}})
    _append(session, "tool_started", {"call_id": pending.id, "name": "book"})  # the replay began; the process died
    result = anyio.run(lambda: agent(tmp_path / "log", ScriptedEngine(echo)).resume(session))
    assert result.output == (
        "saw: Error: the run stopped while this call was running and its result was lost; it may have done some or "
        "all of its work: check before calling it again")
    assert records(session, "tool_started") == [{"call_id": pending.id, "name": "book"}]  # not started again


def test_a_turn_with_a_deferred_approval_and_a_question_stops_for_both_and_one_resume_settles_both(
        tmp_path: Path) -> None:
    from kimik3 import Allow, Defer, tool

    @tool
    def note(text: str) -> str:
        """Write a note.

        Args:
            text: the note.
        """
        return f"noted {text}"

    turn = render_output({"reasoning_content": "both", "tool_calls": [
        {"id": "note:0", "function": {"name": "note", "arguments": json.dumps({"text": "hi"})}},
        {"id": "book:1", "function": {"name": "book", "arguments": json.dumps({"city": "Oslo"})}}]})

    def make(engine: ScriptedEngine) -> Agent:
        base = agent(tmp_path / "log", engine)
        return Agent(tools=[note, *base.toolsets], engine=engine,
                     approval=lambda call: Defer() if call.name == "note" else Allow())

    session = tmp_path / "s.jsonl"
    result = anyio.run(lambda: make(ScriptedEngine([turn])).run("go", session=session))
    assert result.stop_reason == "approval_required"
    [decide], [ask] = result.pending_approvals, result.pending_inputs
    assert (decide.name, ask.name) == ("note", "book")
    result = anyio.run(lambda: make(ScriptedEngine(["done"])).resume(
        session, approvals={decide.id: Allow()}, answers={ask.id: {ASK: {"name": "Ada"}}}))
    assert result.stop_reason == "completed"
    assert sorted(str(m.content) for m in load_session(session) if isinstance(m, ToolMessage)) == [
        "booked Oslo for Ada", "noted hi"]


def test_cli_answer_text_takes_the_type_of_the_questions_one_field(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main

    session, pending = asked(tmp_path)
    party = {"properties": {"party": {"type": "integer"}}, "required": ["party"], "type": "object"}
    # the question as another server asks it (an edit before any answer: the answer binds to what is shown)
    _edit(session, "input_required", {"input_requests": {ASK: {**QUESTION, "params": {
        **QUESTION["params"], "message": "How many?", "requestedSchema": party}}}})
    bad = CliRunner().invoke(main, ["answer", str(session), pending.id, "four"])
    assert bad.exit_code == 2 and "the field 'party' takes an integer, got 'four'" in bad.output
    both = CliRunner().invoke(main, ["answer", str(session), pending.id, "4", "--decline"])
    assert both.exit_code == 2 and "give one answer: TEXT, --json JSON or --decline" in both.output
    assert records(session, "input_responses") == []
    out = CliRunner().invoke(main, ["answer", str(session), pending.id, "4"])
    assert out.exit_code == 0, out.output
    assert records(session, "input_responses")[0]["input_responses"] == {
        ASK: {"action": "accept", "content": {"party": 4}}}


def test_a_url_mode_question_is_shown_with_its_url_and_answered_with_an_empty_object(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main

    session, pending = asked(tmp_path)
    url = {"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in to book",
                                                      "url": "https://example.test/auth", "elicitationId": "e1"}}
    _edit(session, "input_required", {"input_requests": {ASK: url}})
    (waiting,) = pending_inputs(session)
    assert waiting.questions() == [f"inp asks (book, id={pending.id}, question {ASK}): Sign in to book "
                                   "[open https://example.test/auth (host example.test; the MCP server's link: "
                                   "open it only if you trust that host)]"]
    text = CliRunner().invoke(main, ["answer", str(session), pending.id, "done"])
    assert text.exit_code == 2 and (
        "asks you to answer at a link: https://example.test/auth: check its host before you open it (kimik3 show "
        "SESSION names it); once done there, record it with --json '{}' (or --decline)") in text.output
    filled = CliRunner().invoke(main, ["answer", str(session), pending.id, "--json", '{"password": "x"}'])
    assert filled.exit_code == 2 and (f"question '{ASK}' of call '{pending.id}' is answered at its URL: record it "
                                      "done with {} (or decline)") in filled.output
    out = CliRunner().invoke(main, ["answer", str(session), pending.id, "--json", "{}"])
    assert out.exit_code == 0, out.output
    assert records(session, "input_responses")[0]["input_responses"] == {ASK: {"action": "accept", "content": {}}}
