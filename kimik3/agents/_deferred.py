"""Deferred approvals: a tool call the approval hook answered :class:`Defer` waits in the session
for a person's decision, which any later process gives (``Agent.resume(session,
approvals=...)``, or ``kimik3 approve`` then ``kimik3 resume``); each approved call runs exactly
once, whatever crashes on the way (``kill -9`` included).

The approval journal: records of the session file (:mod:`._session`), each written (one
``write`` of a whole line, so it survives the process) before the step it announces::

    {"deferred": {"call_id": ..., "name": ..., "arguments": {...}}}   the hook deferred the call
    {"decision": {"call_id": ..., "decision": "allow" | "deny" | "edit", "reason": ..., "arguments": {...}}}
    {"tool_started": {"call_id": ..., "name": ...}}                    an approved call is about to run
    {"message": {"role": "tool", "tool_call_id": ..., ...}}           its result (the history's)

A run continuing the session answers each call of the last assistant message that has no result
by its journal, before anything else:

- started, no result: ``interrupted`` (it may have done some or all of its work); it is never run
  again: the model reads that and decides.
- decided: runs once (allow, edit: ``tool_started`` first), or gets its denial (deny), through the
  agent's ordinary tool path (tracing, hooks, time budget).
- deferred, undecided: still waits; nothing else runs and the run stops again with
  ``stop_reason="approval_required"``.
- none of these: a crash left it (a call that may have been running): answered as an orphan.

The journal of a turn is the records after its assistant message (call ids such as K3's
``write:0`` repeat across turns, so an older record never applies to a newer call). Every record
is validated before it is acted on; one that does not fit (no such call, a ``deferred`` record
whose name or arguments are not exactly the call's, a second ``deferred`` for a call, a decision
on a call never deferred, a start without an approval) is a :class:`~kimik3.SessionError` naming
its line. What a person is shown of a deferred call (:func:`pending_approvals`, ``kimik3 show``,
``kimik3 approve``) and what runs are both the call of the assistant message (one source): a
``deferred`` record only says that the call waits. A decision, once recorded, is final: the
same decision again is a no-op, another one a :class:`~kimik3.UserError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .._exceptions import JSONLimitError, SessionError, UserError
from .._json import check_json_limits
from ..tools import ToolResult
from ..tools import _failures as failures
from ..tools._failures import FailureText
from ..types import AssistantMessage, Message, ToolCall, ToolMessage
from ._approval import apply_decision, approve, pending_call
from ._hooks import RunHooks
from ._run import _Run
from ._session import JournalRecord, SessionWriter, load_turn
from ._types import AgentEvent, Allow, ApprovalHook, Defer, Deny, Edit, PendingCall, ToolCallApprovedEvent

__all__ = [
    "Approvals", "CallJournal", "decide", "pending_approvals", "prepare_resume", "read_journal", "record_approvals",
    "settle",
]

ORPHAN = "the run stopped before this call finished"
"""Why a call a crash left without a result (and without a journal) is answered with an error."""

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
        started: an approved call began to run (``tool_started``).
    """

    call: ToolCall
    answered: bool = False
    deferred: PendingCall | None = None
    decision: Decision | None = None
    decided_at: int = 0
    started: bool = False


def _last_turn(messages: Sequence[Message]) -> tuple[list[ToolCall], set[str]]:
    """The calls of the last assistant message and the ids of the results after it."""
    last = len(messages) - 1
    while last >= 0 and isinstance(messages[last], ToolMessage):
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


def _decision(body: dict[str, Any]) -> Decision:
    kind = body.get("decision")
    if kind == "allow":
        return Allow()
    if kind == "deny":
        reason = body.get("reason")
        if not isinstance(reason, str):
            raise ValueError(f"a denial's reason must be text, got {reason!r:.40}")
        return Deny(reason)
    if kind == "edit":
        return Edit(_arguments(body.get("arguments"), "an edit's arguments"))
    raise ValueError(f"unknown decision {kind!r:.40} (allow, deny or edit)")


def _body(decision: Decision, call_id: str) -> dict[str, Any]:
    if isinstance(decision, Deny):
        return {"call_id": call_id, "decision": "deny", "reason": decision.reason}
    if isinstance(decision, Edit):
        return {"call_id": call_id, "decision": "edit", "arguments": decision.arguments}
    return {"call_id": call_id, "decision": "allow"}


def _canonical(arguments: Any) -> str:
    """One text for equal JSON (``1``, ``1.0`` and ``true`` stay apart, key order does not count)."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


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
            deferred or decided twice, a start without an approval, or a turn whose calls share
            an id the journal names.
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
            if sum(c.id == call_id for c in calls) > 1:
                raise ValueError(f"several calls of the last turn have the id {call_id!r}")
            if kind == "deferred":
                entry.deferred = _deferred(entry, body)
            elif kind == "decision":
                if entry.deferred is None or entry.decision is not None:
                    raise ValueError(f"call {call_id!r} was " + ("decided already" if entry.decision is not None
                                                                 else "never deferred"))
                entry.decision, entry.decided_at = _decision(body), line
            elif entry.decision is None or isinstance(entry.decision, Deny):  # tool_started
                raise ValueError(f"call {call_id!r} started without an approval")
            else:
                entry.started = True
        except ValueError as e:
            raise SessionError(f"{path}:{line}: not a valid {kind} record: {e}") from None
    return entries


def pending_approvals(session: str | os.PathLike[str]) -> list[PendingCall]:
    """The tool calls of ``session``'s last turn that await a decision (deferred, not decided),
    in call order. Reads only.

    Raises:
        SessionError: as :func:`~kimik3.agents.load_session`, or a journal record that does not fit.
    """
    messages, records = load_turn(session)
    return [e.deferred for e in read_journal(session, messages, records) if e.deferred and e.decision is None]


def record_approvals(session: str | os.PathLike[str], approvals: Mapping[str, Decision]) -> list[PendingCall]:
    """Record decisions on calls ``session``'s last turn deferred, before anything runs (a
    ``decision`` record each; the run that continues the session carries them out, once).

    Args:
        session: the session file (it must exist).
        approvals: ``{call id: Allow() | Deny(reason) | Edit(arguments)}`` for calls that await
            a decision now (:func:`pending_approvals`; ids such as ``write:0`` repeat across turns:
            an id names the call of the last turn). A call decided already the same way is left
            as it is, so a retried resume decides nothing twice.

    Returns:
        The calls decided now, in the order given.

    Raises:
        UserError: an id of no call awaiting a decision (the ones that do are named), a value
            that is no decision (``Defer()`` included), an :class:`Edit` whose arguments are not
            a JSON object within the limits, or a call decided otherwise before; nothing is
            recorded then.
        SessionError: as :class:`SessionWriter` (missing, in use by another run, ...).
    """
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
    if not approvals:
        return []
    load_turn(session)  # a session must be there: the writer would create one
    writer = SessionWriter(session)
    try:
        entries = {e.call.id: e for e in read_journal(session, writer.messages, writer.journal)}
        waiting = [i for i, e in entries.items() if e.deferred and e.decision is None]
        todo: list[PendingCall] = []
        for call_id, decision in approvals.items():
            entry = entries.get(call_id) if isinstance(call_id, str) else None
            if entry is not None and entry.decision is not None:
                if entry.decision != decision:
                    done = _body(entry.decision, call_id)["decision"]
                    raise UserError(f"call {call_id!r} of {session} was decided already ({done}, line "
                                    f"{entry.decided_at}); a decision is final")
                continue
            if entry is None or entry.deferred is None:
                raise UserError(f"no call {call_id!r} awaits approval in {session}; awaiting: "
                                f"{', '.join(map(repr, waiting)) or 'none'}")
            todo.append(entry.deferred)
        for pending in todo:
            writer.record("decision", _body(approvals[pending.id], pending.id))
        return todo
    finally:
        writer.close()


def prepare_resume(session: str | os.PathLike[str], approvals: Approvals, task: object) -> None:
    """What :meth:`Agent.resume` does first: record ``approvals`` (:func:`record_approvals`) and
    refuse a ``task`` while calls still wait for a decision (before anything else is written).

    Raises:
        UserError: as :func:`record_approvals`; a ``task`` while calls await a decision.
        SessionError: as :func:`record_approvals` / :func:`pending_approvals`.
    """
    record_approvals(session, approvals)
    if task is not None:
        _refuse_task([p.id for p in pending_approvals(session)])


def _refuse_task(waiting: list[str]) -> None:
    if waiting:
        raise UserError(f"{len(waiting)} tool call(s) of this session await approval "
                        f"({', '.join(map(repr, waiting))}): decide them first (Agent.resume(session, "
                        "approvals=...) or kimik3 approve), then give a task")


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
    waiting = [e.call.id for e in entries if e.deferred and e.decision is None]
    if task:
        _refuse_task(waiting)
    for e in entries:
        name = e.call.function.name
        if e.started:
            run.failed_calls += 1
            run.issue(f"the approved call to {name!r} ({e.call.id}) was interrupted before its result was recorded; "
                      "it was not run again")
            message = ToolMessage(content=text(failures.interrupted_by_stop()), tool_call_id=e.call.id, name=name)
            run.add(message)
        elif e.decision is not None:
            run.decisions[e.call.id] = e.decision
        elif e.deferred is not None:
            run.deferred[e.call.id] = e.deferred
        else:
            run.add(ToolMessage(content=text(failures.orphaned(ORPHAN)), tool_call_id=e.call.id, name=name))
    calls = [e.call for e in entries if e.call.id in run.decisions]
    if not calls:
        return
    await hooks.before_tools(run.turns, calls)
    try:
        async for event in run_tools(run, calls, set()):
            yield event
    finally:
        run.decisions.clear()  # a later turn's call with the same id asks the hook
        with anyio.CancelScope(shield=True):
            await hooks.after_tools(run.turns, calls)
