"""Deferred approvals: a tool call the approval hook answered :class:`Defer` waits in the session
for a person's decision, which any later process gives (``Agent.resume(session,
approvals=...)``, or ``kimik3 approve`` then ``kimik3 resume``); each approved call runs exactly
once, whatever crashes on the way (``kill -9`` included).

The approval journal: records of the session file (:mod:`._session`), each written (one
``write`` of a whole line, so it survives the process) before the step it announces::

    {"deferred": {"call_id": ..., "name": ..., "arguments": {...}}}   the hook deferred the call
    {"decision": {"call_id": ..., "decision": "allow" | "deny" | "edit", "reason": ..., "arguments": {...}}}
    {"tool_started": {"call_id": ..., "name": ...}}                    an approved call is about to run
    {"tool_finished": {"call_id": ..., "name": ...}}                   any call of the turn returned
    {"message": {"role": "tool", "tool_call_id": ..., ...}}           its result (the history's)

A ``decision`` to run a call (allow, edit) carries ``sha256``: the SHA-256 of the call it
approved, its id, tool name and the arguments that would run (the call's, or the edit's)
(:func:`call_digest`), so a call changed in the file after the decision (another tool, other
arguments, ids swapped between calls) is refused, never run (issue 40). A turn's results are appended together
when its last call ends, so each call's end is journaled (``tool_finished``) as it happens: a
crash in between leaves a call known to have finished.

A run continuing the session answers each call of the last assistant message that has no result
by its journal, before anything else:

- finished, no result: it ran to its end and its result was lost; never run again.
- started, no result: ``interrupted`` (it may have done some or all of its work); it is never run
  again: the model reads that and decides.
- decided: runs once (allow, edit: ``tool_started`` first), or gets its denial (deny), through the
  agent's ordinary tool path (tracing, hooks, time budget).
- deferred, undecided: still waits; nothing else runs and the run stops again with
  ``stop_reason="approval_required"``.
- none of these: a crash left it; whether it ran, and how far, is unknown: answered as an orphan
  saying so (never that it did not finish).

The journal of a turn is the records after its assistant message (call ids such as K3's
``write:0`` repeat across turns, so an older record never applies to a newer call). Every record
is validated before it is acted on; one that does not fit (no such call, a ``deferred`` record
whose name or arguments are not exactly the call's, a second ``deferred`` for a call, a decision
on a call never deferred, a start without an approval) is a :class:`~kimik3.SessionError` naming
its line. What a person is shown of a deferred call (:func:`pending_approvals`, ``kimik3 show``,
``kimik3 approve``) and what runs are both the call of the assistant message (one source): a
``deferred`` record only says that the call waits. A decision, once recorded, is final: the
same decision again is a no-op, another one a :class:`~kimik3.UserError`.

Why one file a little past the ~600-line guide (issue 42 point 5): the journal's rules (record,
validate, settle) are one concern and must be read together to see that a call runs at most
once; the MCP questions' records live apart (:mod:`._inputs`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .._exceptions import JSONLimitError, SessionError, UserError
from .._json import check_json_limits
from ..tools import InputReplay, ToolResult, failures
from ..tools.failures import FailureText
from ..types import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage
from ._approval import apply_decision, approve, pending_call
from ._hooks import RunHooks
from ._inputs import answer_body, input_digest, read_answer, read_asked, responses_for
from ._run import _Run
from ._session import JournalRecord, SessionLog, SessionWriter, Source
from ._types import AgentEvent, Allow, ApprovalHook, Defer, Deny, Edit, PendingCall, PendingInput, ToolCallApprovedEvent

__all__ = [
    "Approvals", "CallJournal", "call_digest", "decide", "finished", "pending_approvals", "pending_inputs",
    "prepare_resume", "read_journal", "record_answers", "record_approvals", "replayed", "settle",
]

ORPHAN = ("the run stopped before this call's result was recorded; whether it ran, and how far, is unknown: check "
          "before calling it again")
"""Why a call a crash left without a result (and without a journal) is answered with an error:
its outcome is unknown (it may have finished), so it is never said not to have finished."""

Decision = Allow | Deny | Edit
Approvals = Mapping[str, Decision]
"""``{call id: Allow() | Deny(reason) | Edit(arguments)}``: decisions on deferred calls."""


@dataclass
class CallJournal:
    """A tool call of the session's last turn and what its journal says.

    Attributes:
        call: the call, as the assistant message holds it.
        answered: a result message answers it.
        deferred: what the hook was shown when it deferred the call (None: never deferred).
        decision: the decision recorded on it, and its line.
        started: an approved (or answered) call began to run (``tool_started``), and has not
            stopped on new questions since.
        finished: the call returned (``tool_finished``); its result was to follow.
        asked: the MCP questions it stopped on last (``input_required``; :mod:`._inputs`).
        responses: their answers (``input_responses``), and the answer's line.
    """

    call: ToolCall
    answered: bool = False
    deferred: PendingCall | None = None
    decision: Decision | None = None
    decided_at: int = 0
    started: bool = False
    finished: bool = False
    asked: PendingInput | None = None
    responses: dict[str, Any] | None = None
    answered_at: int = 0


def _last_turn(messages: Sequence[Message]) -> tuple[list[ToolCall], set[str]]:
    """The calls of the last assistant message and the ids of the results after it (a system
    note after them, such as a budget's "do not call tools", is still that turn's)."""
    last = len(messages) - 1
    while last >= 0 and isinstance(messages[last], (ToolMessage, SystemMessage)):
        last -= 1
    message = messages[last] if last >= 0 else None
    if not isinstance(message, AssistantMessage) or not message.tool_calls:
        return [], set()
    return list(message.tool_calls), {m.tool_call_id for m in messages[last + 1 :]
                                      if isinstance(m, ToolMessage) and m.tool_call_id is not None}


def _arguments(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    try:
        check_json_limits(value)
    except JSONLimitError as e:
        raise ValueError(f"{what} beyond the JSON limits: {e}") from None
    return value


def _decision(body: dict[str, Any], pending: PendingCall) -> Decision:
    """The decision a record holds, checked against the call it decides: one that runs the call
    must carry the digest of exactly the call that would run (:func:`call_digest`)."""
    kind = body.get("decision")
    if kind == "deny":
        reason = body.get("reason")
        if not isinstance(reason, str):
            raise ValueError(f"a denial's reason must be text, got {reason!r:.40}")
        return Deny(reason)
    if kind == "allow":
        decision: Decision = Allow()
        runs = pending.arguments
    elif kind == "edit":
        decision = Edit(_arguments(body.get("arguments"), "an edit's arguments"))
        runs = decision.arguments
    else:
        raise ValueError(f"unknown decision {kind!r:.40} (allow, deny or edit)")
    digest = body.get("sha256")
    if not isinstance(digest, str):
        raise ValueError(f"an {kind} decision must carry the sha256 of the arguments it approved (written before "
                         "decisions were bound to their arguments: decide again in a fork)")
    now = call_digest(pending.id, pending.name, runs)
    if digest != now:
        raise ValueError(f"call {pending.id!r} ({pending.name}) is not the one approved (its id, tool and arguments: "
                         f"sha256 {now[:16]}… now, {digest[:16]:.16}… approved): the session was changed after the "
                         "decision; nothing runs")
    return decision


def _body(decision: Decision, pending: PendingCall) -> dict[str, Any]:
    if isinstance(decision, Deny):
        return {"call_id": pending.id, "decision": "deny", "reason": decision.reason}
    if isinstance(decision, Edit):
        return {"call_id": pending.id, "decision": "edit", "arguments": decision.arguments,
                "sha256": call_digest(pending.id, pending.name, decision.arguments)}
    return {"call_id": pending.id, "decision": "allow",
            "sha256": call_digest(pending.id, pending.name, pending.arguments)}


def _canonical(arguments: Any) -> str:
    """One text for equal JSON (``1``, ``1.0`` and ``true`` stay apart, key order does not count)."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def call_digest(call_id: str, name: str, arguments: Any) -> str:
    """The SHA-256 (64 hex digits) of a call that would run: ``[call id, tool name, arguments]``
    as canonical JSON (sorted keys, ASCII with ``\\uXXXX`` escapes, a lone surrogate as
    ``\\udcXX``): what a ``decision`` record binds, so neither the tool, the arguments nor the
    call an id names can change after it (issue 40)."""
    return hashlib.sha256(json.dumps([call_id, name, arguments], sort_keys=True).encode("ascii")).hexdigest()


def _deferred(entry: CallJournal, body: dict[str, Any]) -> PendingCall:
    """The call a ``deferred`` record names, as the assistant message holds it (the one source
    of what a person is shown and of what runs); the record must say exactly that."""
    call_id = entry.call.id
    if entry.deferred is not None:
        raise ValueError(f"call {call_id!r} was deferred already")
    pending = pending_call(entry.call)
    if body.get("name") != pending.name:
        raise ValueError(f"call {call_id!r} is to {pending.name!r}, not {body.get('name')!r:.60}")
    arguments = _canonical(_arguments(body.get("arguments"), "the arguments"))
    if arguments != _canonical(pending.arguments):
        raise ValueError(f"the arguments {arguments:.80} are not those of call {call_id!r} "
                         f"({_canonical(pending.arguments):.80})")
    return pending


def read_journal(path: str | os.PathLike[str] | None, messages: Sequence[Message],
                 records: Sequence[JournalRecord]) -> list[CallJournal]:
    """The calls of the last assistant message (in call order) with their journal, validated.

    Raises:
        SessionError: a record that does not fit (``path:line: ...``): no ``call_id``, a call
            the turn does not have, a ``deferred`` record whose tool name or arguments are not
            exactly the call's (or a second one for the call), a decision on a call never
            deferred or decided twice, an allow or edit whose ``sha256`` is missing or is not
            that of the call that would run (the session changed after the decision), a
            start without an approval, a ``tool_finished`` of a deferred call that never started
            (or a ``deferred`` record after one), or a turn whose calls share an id the journal names.
    """
    calls, answered = _last_turn(messages)
    entries = [CallJournal(c, c.id in answered) for c in calls]
    by_id = {e.call.id: e for e in entries}
    for line, kind, body in records:
        try:
            call_id = body.get("call_id") if isinstance(body, dict) else None
            if not isinstance(call_id, str):
                raise ValueError(f"a {kind} record needs a call_id (text)")
            entry = by_id.get(call_id)
            if entry is None:
                raise ValueError(f"no call {call_id!r} in the last turn")
            shared = sum(c.id == call_id for c in calls) > 1
            if kind == "tool_finished":  # every call's; of calls sharing an id, none can be told apart
                if (entry.deferred is not None or entry.asked is not None) and not entry.started:
                    why = "was deferred" if entry.asked is None else "waits for answers"
                    raise ValueError(f"call {call_id!r} {why} and never started (tool_started)")
                entry.finished = not shared
                continue
            if shared:
                raise ValueError(f"several calls of the last turn have the id {call_id!r}")
            if kind == "deferred":
                entry.deferred = _deferred(entry, body)
                if entry.finished:
                    raise ValueError(f"call {call_id!r} was journaled finished before")
            elif kind == "decision":
                if entry.deferred is None or entry.decision is not None:
                    raise ValueError(f"call {call_id!r} was " + ("decided already" if entry.decision is not None
                                                                 else "never deferred"))
                entry.decision, entry.decided_at = _decision(body, entry.deferred), line
            elif kind == "input_required":
                _asked(entry)
                edit = entry.decision.arguments if isinstance(entry.decision, Edit) else None
                entry.asked = read_asked(entry.call, body, pending_call(entry.call).arguments, edit)
                entry.responses, entry.started = None, False
            elif kind == "input_responses":
                if entry.asked is None or entry.responses is not None:
                    raise ValueError(f"call {call_id!r} " + ("was answered already" if entry.asked is not None
                                                             else "asked no questions"))
                entry.responses, entry.answered_at = read_answer(body, entry.asked), line
            elif entry.asked is not None:  # tool_started of a replay
                if entry.responses is None or entry.started:
                    raise ValueError(f"call {call_id!r} started again without answers to its questions")
                entry.started = True
            elif entry.decision is None or isinstance(entry.decision, Deny):  # tool_started
                raise ValueError(f"call {call_id!r} started without an approval")
            else:
                entry.started = True
        except ValueError as e:
            raise SessionError(f"{path}:{line}: not a valid {kind} record: {e}") from None
    return entries


def _asked(entry: CallJournal) -> None:
    """Refuse an ``input_required`` record where the call cannot have asked: it finished, was
    deferred and never started, or asked before and was not replayed since."""
    call_id = entry.call.id
    if entry.finished:
        raise ValueError(f"call {call_id!r} was journaled finished before")
    if entry.deferred is not None and not entry.started:
        raise ValueError(f"call {call_id!r} was deferred and never started")
    if entry.asked is not None and not entry.started:
        raise ValueError(f"call {call_id!r} asked before and was not replayed with answers since")


def pending_inputs(session: Source | SessionLog) -> list[PendingInput]:
    """The tool calls of ``session``'s last turn whose MCP questions await a person's answer, in
    call order (:class:`PendingInput`). Reads only.

    Raises:
        SessionError: as :func:`~kimik3.agents.load_session`, or a journal record that does not fit.
    """
    log = session if isinstance(session, SessionLog) else SessionLog.read(session)
    return [e.asked for e in read_journal(log.path, log.messages, log.journal) if e.asked and e.responses is None]


def record_answers(session: Source | SessionWriter, answers: Mapping[str, Mapping[str, dict[str, Any] | None]],
                   shown: Sequence[PendingInput] | None = None) -> list[PendingInput]:
    """Record answers to the MCP questions calls of ``session``'s last turn wait on, before
    anything runs (an ``input_responses`` record each, bound to the questions by their SHA-256:
    :func:`~kimik3.agents._inputs.input_digest`); the run that continues the session replays each
    answered call once with them.

    Args:
        session: the session (it must exist), or the writer of a run that holds it already.
        answers: ``{call id: {request key: content}}``: for every question of the call, a dict
            of the values its ``requestedSchema`` asks for, or None to decline (:func:`pending_inputs`
            lists the questions). A call answered already the same way is left as it is.
        shown: the questions a person was shown (``kimik3 answer``): each answered call must
            still have exactly those (call, arguments, requests, state) when the file is read
            under the writer's lock.

    Returns:
        The calls answered now, in the order given.

    Raises:
        UserError: an id of no call awaiting answers (the ones that do are named), answers not
            for exactly the call's questions, a content neither a dict within the JSON limits
            nor None, or a call answered otherwise before; nothing is recorded then.
        SessionError: as :class:`SessionWriter`; an answered call that is not the one ``shown``.
    """
    if not isinstance(answers, Mapping):
        raise UserError(f"answers must be a mapping {{call id: {{request key: content or None}}}}, "
                        f"got {type(answers).__name__}")
    if not answers:
        return []
    writer = session if isinstance(session, SessionWriter) else SessionWriter(session, create=False)
    try:
        entries = {e.call.id: e for e in read_journal(writer.path, writer.messages, writer.journal)}
        waiting = [i for i, e in entries.items() if e.asked and e.responses is None]
        todo: list[tuple[PendingInput, dict[str, Any]]] = []
        for call_id, given in answers.items():
            entry = entries.get(call_id) if isinstance(call_id, str) else None
            if entry is None or entry.asked is None:
                raise UserError(f"no call {call_id!r} awaits answers in {writer.path}; awaiting: "
                                f"{', '.join(map(repr, waiting)) or 'none'}")
            responses = responses_for(entry.asked, given)
            if entry.responses is not None:
                if entry.responses != responses:
                    raise UserError(f"call {call_id!r} of {writer.path} was answered already (line "
                                    f"{entry.answered_at}); an answer is final")
                continue
            todo.append((entry.asked, responses))
        if shown is not None:
            seen = {p.id: input_digest(p) for p in shown}
            for pending, _ in todo:
                if seen.get(pending.id) != input_digest(pending):
                    raise SessionError(f"the questions of call {pending.id!r} of {writer.path} changed after they "
                                       "were shown; nothing was recorded: read them again and answer")
        for pending, responses in todo:
            writer.record("input_responses", answer_body(pending, responses))
        return [pending for pending, _ in todo]
    finally:
        if writer is not session:
            writer.close()


def pending_approvals(session: Source | SessionLog) -> list[PendingCall]:
    """The tool calls of ``session``'s last turn that await a decision (deferred, not decided),
    in call order. Reads only (a :class:`SessionLog` given is not read again).

    Raises:
        SessionError: as :func:`~kimik3.agents.load_session`, or a journal record that does not fit.
    """
    log = session if isinstance(session, SessionLog) else SessionLog.read(session)
    return [e.deferred for e in read_journal(log.path, log.messages, log.journal) if e.deferred and e.decision is None]


def _check_approvals(approvals: Mapping[str, Decision]) -> None:
    if not isinstance(approvals, Mapping):
        raise UserError(f"approvals must be a mapping {{call id: Allow() | Deny(reason) | Edit(arguments)}}, "
                        f"got {type(approvals).__name__}")
    for call_id, decision in approvals.items():
        if not isinstance(decision, (Allow, Deny, Edit)):
            raise UserError(f"approvals[{call_id!r}] must be Allow(), Deny(reason) or Edit(arguments), "
                            f"got {decision!r:.80}")
        if isinstance(decision, Edit):
            try:
                _arguments(decision.arguments, "Edit(arguments)")
            except ValueError as e:
                raise UserError(f"approvals[{call_id!r}]: {e}") from None


def record_approvals(session: Source | SessionWriter, approvals: Mapping[str, Decision],
                     shown: Sequence[PendingCall] | None = None) -> list[PendingCall]:
    """Record decisions on calls ``session``'s last turn deferred, before anything runs (a
    ``decision`` record each, carrying the SHA-256 of the arguments it lets run; the run that
    continues the session carries them out, once).

    Args:
        session: the session (it must exist), or the writer of a run that holds it already
            (``Agent.resume``: the file is read and locked once).
        approvals: ``{call id: Allow() | Deny(reason) | Edit(arguments)}`` for calls that await
            a decision now (:func:`pending_approvals`; ids such as ``write:0`` repeat across turns:
            an id names the call of the last turn). A call decided already the same way is left
            as it is, so a retried resume decides nothing twice.
        shown: the calls a person was shown to decide on (``kimik3 approve``): each decided call
            must still be exactly that one (id, tool, arguments) when the file is read under the
            writer's lock, so an edit made while the person read is never what gets approved.

    Returns:
        The calls decided now, in the order given.

    Raises:
        UserError: an id of no call awaiting a decision (the ones that do are named), a value
            that is no decision (``Defer()`` included), an :class:`Edit` whose arguments are not
            a JSON object within the limits, or a call decided otherwise before; nothing is
            recorded then.
        SessionError: as :class:`SessionWriter` (missing, in use by another run, ...); a decided
            call that is not the one ``shown`` (nothing is recorded then).
    """
    _check_approvals(approvals)
    if not approvals:
        return []
    if isinstance(session, SessionWriter):
        return _record(session, approvals, shown)
    writer = SessionWriter(session, create=False)
    try:
        return _record(writer, approvals, shown)
    finally:
        writer.close()


def _record(writer: SessionWriter, approvals: Mapping[str, Decision],
            shown: Sequence[PendingCall] | None) -> list[PendingCall]:
    entries = {e.call.id: e for e in read_journal(writer.path, writer.messages, writer.journal)}
    waiting = [i for i, e in entries.items() if e.deferred and e.decision is None]
    todo: list[PendingCall] = []
    for call_id, decision in approvals.items():
        entry = entries.get(call_id) if isinstance(call_id, str) else None
        if entry is not None and entry.decision is not None and entry.deferred is not None:
            if entry.decision != decision:
                done = _body(entry.decision, entry.deferred)["decision"]
                raise UserError(f"call {call_id!r} of {writer.path} was decided already ({done}, line "
                                f"{entry.decided_at}); a decision is final")
            continue
        if entry is None or entry.deferred is None:
            raise UserError(f"no call {call_id!r} awaits approval in {writer.path}; awaiting: "
                            f"{', '.join(map(repr, waiting)) or 'none'}")
        todo.append(entry.deferred)
    if shown is not None:
        seen = {p.id: call_digest(p.id, p.name, p.arguments) for p in shown}
        for pending in todo:  # the digest: 1, 1.0 and true stay apart
            if seen.get(pending.id) != call_digest(pending.id, pending.name, pending.arguments):
                raise SessionError(f"call {pending.id!r} of {writer.path} changed after it was shown (now "
                                   f"{pending.name} {_canonical(pending.arguments):.80}); nothing was recorded: "
                                   "read it again and decide")
    for pending in todo:
        writer.record("decision", _body(approvals[pending.id], pending))
    return todo


def prepare_resume(writer: SessionWriter, approvals: Approvals, task: object,
                   answers: Mapping[str, Mapping[str, dict[str, Any] | None]] | None = None) -> None:
    """What :meth:`Agent.resume` does first, through the run's own writer (one read, one lock):
    record ``approvals`` (:func:`record_approvals`) and ``answers`` (:func:`record_answers`), and
    refuse a ``task`` while calls still wait (before anything else is written).

    Raises:
        UserError: as :func:`record_approvals` / :func:`record_answers`; a ``task`` while calls
            await a decision or answers.
        SessionError: as :func:`record_approvals` / :func:`pending_approvals`.
    """
    record_approvals(writer, approvals)
    record_answers(writer, answers or {})
    if task is not None:
        _refuse_task(read_journal(writer.path, writer.messages, writer.journal))


def _refuse_missing_tools(entries: Sequence[CallJournal], tools: Mapping[str, object]) -> None:
    """Refuse a resume that would run an approved or answered call whose tool this run lacks (an
    MCP server not given again, a prefix changed, a harness feature off): run, it would end as
    "unknown tool" and use up the decision or the answers. Every such call is named; a denied call
    is not one (its denial is its result, tool or not). Nothing is run or recorded (the run's
    ``run_start`` aside).

    Raises:
        UserError: the calls (id, tool, MCP server), and to resume with the tools of the run that
            stopped.
    """
    lacking: list[str] = []
    for e in entries:
        if e.finished or e.started or e.call.function.name in tools:
            continue
        answered = e.asked is not None and e.responses is not None
        if not answered and (e.asked is not None or e.decision is None or isinstance(e.decision, Deny)):
            continue  # still waiting, denied or orphaned: answered without the tool
        server = f" (MCP server {e.asked.server!r})" if answered and e.asked is not None and e.asked.server else ""
        kind = "answered" if answered else "approved"
        lacking.append(f"{kind} call {e.call.id!r} to {e.call.function.name!r}{server}")
    if lacking:
        one = len(lacking) == 1
        raise UserError(f"the session's {' and '.join(lacking)} {'waits' if one else 'wait'} to run, but this run has "
                        f"no tool of {'that name' if one else 'those names'}: resume with the tools of the run that "
                        "stopped (kimik3 resume: the same --mcp options); nothing was run")


def _refuse_task(entries: Sequence[CallJournal]) -> None:
    waiting = [e.call.id for e in entries if e.deferred and e.decision is None and e.asked is None]
    if waiting:
        raise UserError(f"{len(waiting)} tool call(s) of this session await approval "
                        f"({', '.join(map(repr, waiting))}): decide them first (Agent.resume(session, "
                        "approvals=...) or kimik3 approve), then give a task")
    asking = [e.call.id for e in entries if e.asked and e.responses is None and not e.answered]
    if asking:
        raise UserError(f"{len(asking)} tool call(s) of this session await answers to an MCP server's questions "
                        f"({', '.join(map(repr, asking))}): answer them first (Agent.resume(session, "
                        "answers=...) or kimik3 answer), then give a task")


async def decide(run: _Run, hook: ApprovalHook | None, call: ToolCall,
                 text: FailureText) -> ToolCallApprovedEvent | ToolResult | None:
    """The approval of ``call`` in ``run``: the decision recorded in the session when the run
    carries one out (an approved call is journaled ``tool_started`` before it runs), else the
    hook's; None when the hook deferred it (journaled ``deferred``, kept in ``run.deferred``).

    Raises:
        UserError: the hook deferred a call of a run without a session (nowhere to keep it).
    """
    recorded = run.decisions.pop(call.id, None)
    if recorded is not None:
        decision = apply_decision(recorded, call, text)
        if isinstance(decision, ToolCallApprovedEvent) and run.session is not None:
            run.session.record("tool_started", {"call_id": call.id, "name": call.function.name})
        return decision
    outcome = await approve(hook, call, text)
    if not isinstance(outcome, Defer):
        return outcome
    if run.session is None:
        raise UserError("the approval hook deferred a call (Defer()), which needs a session to wait in: "
                        "run with session=..., then Agent.resume(session, approvals=...)")
    calls, _ = _last_turn(run.messages)
    if sum(c.id == call.id for c in calls) > 1:  # a decision could not tell them apart
        why = f"its id {call.id!r} is shared by another call of this turn, so it cannot wait for a decision"
        return ToolResult.from_failure(failures.not_run(why), text)
    pending = pending_call(call)
    run.session.record("deferred", {"call_id": call.id, "name": pending.name, "arguments": pending.arguments})
    run.deferred[call.id] = pending
    return None


def replayed(run: _Run, call: ToolCall) -> tuple[ToolCallApprovedEvent, InputReplay] | None:
    """``call``, answered in the session, about to be replayed with its answers (journaled
    ``tool_started`` first): the call with the arguments it asked with, and the answers; None
    when ``call`` is no replay of this run. A replay is not asked to the approval hook again:
    the call was approved when it first ran, and the person answered its questions."""
    replay = run.replays.pop(call.id, None)
    if replay is None:
        return None
    pending, answers = replay
    if run.session is not None:
        run.session.record("tool_started", {"call_id": call.id, "name": call.function.name})
    edited = _canonical(pending.arguments) != _canonical(pending_call(call).arguments)
    return ToolCallApprovedEvent(call.id, call.function.name, pending.arguments, edited=edited), answers


def finished(run: _Run, call: ToolCall) -> None:
    """Journal that ``call`` returned (``tool_finished``), the moment it does: its result is
    appended only when the turn's last call ends, and a crash in between must not leave a
    finished call said to have not finished (issue 40)."""
    if run.session is not None:
        run.session.record("tool_finished", {"call_id": call.id, "name": call.function.name})


RunTools = Callable[[_Run, Sequence[ToolCall], set[str]], AsyncIterator[AgentEvent]]


async def settle(run: _Run, run_tools: RunTools, hooks: RunHooks, text: FailureText, *,
                 task: bool) -> AsyncIterator[AgentEvent]:
    """Answer the calls the history's last turn left without a result, by their journal (see the
    module docstring): interrupted, decided (run or denied, as a turn's calls), still waiting
    (``run.deferred``), or orphaned.

    Raises:
        UserError: ``task``, while calls still wait for a decision (nothing but the run's
            ``run_start`` record is written then; :func:`prepare_resume` refuses it before).
        SessionError: a journal record that does not fit.
    """
    records = run.session.journal if run.session is not None else []
    path = run.session.path if run.session is not None else None
    entries = [e for e in read_journal(path, run.messages, records) if not e.answered]
    if task:
        _refuse_task(entries)
    _refuse_missing_tools(entries, run.tools)
    for e in entries:
        name = e.call.function.name
        if e.finished:
            run.failed_calls += 1
            run.issue(f"the call to {name!r} ({e.call.id}) finished, but the run stopped before its result was "
                      "recorded; it was not run again")
            run.add(ToolMessage(content=text(failures.finished_unrecorded()), tool_call_id=e.call.id, name=name))
        elif e.started:
            run.failed_calls += 1
            run.issue(f"the approved call to {name!r} ({e.call.id}) was interrupted before its result was recorded; "
                      "it was not run again")
            message = ToolMessage(content=text(failures.interrupted_by_stop()), tool_call_id=e.call.id, name=name)
            run.add(message)
        elif e.asked is not None and e.responses is not None:
            run.replays[e.call.id] = (e.asked, InputReplay(e.responses, e.asked.request_state))
        elif e.asked is not None:
            run.waiting[e.call.id] = e.asked
        elif e.decision is not None:
            run.decisions[e.call.id] = e.decision
        elif e.deferred is not None:
            run.deferred[e.call.id] = e.deferred
        else:
            run.add(ToolMessage(content=text(failures.orphaned(ORPHAN)), tool_call_id=e.call.id, name=name))
    calls = [e.call for e in entries if e.call.id in run.decisions or e.call.id in run.replays]
    if not calls:
        return
    await hooks.before_tools(run.turns, calls)
    try:
        async for event in run_tools(run, calls, set()):
            yield event
    finally:
        run.decisions.clear()  # a later turn's call with the same id asks the hook
        run.replays.clear()
        with anyio.CancelScope(shield=True):
            await hooks.after_tools(run.turns, calls)
