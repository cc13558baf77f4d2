"""Approval of a tool call, in one place (:class:`~kimik3.agents.Agent`'s ``approval`` hook); a
decision the hook defers (:class:`Defer`) is kept by :mod:`._deferred`."""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

from .._exceptions import JSONLimitError
from .._json import check_json_limits
from ..tools import ToolResult, failures
from ..tools.failures import FailureText, default_failure_text
from ..types import TextPart, ToolCall
from ._types import Allow, ApprovalDecision, ApprovalHook, Defer, Deny, Edit, PendingCall, ToolCallApprovedEvent

__all__ = ["apply_decision", "approve", "edit_note", "pending_call"]

log = logging.getLogger("kimik3.agent")


def pending_call(call: ToolCall) -> PendingCall:
    """What the hook (and a person deciding later) sees of ``call``: id, tool name, the parsed
    arguments (``{}`` when they are not a JSON object within the limits)."""
    try:
        parsed = call.function.parsed_arguments()
    except ValueError:  # not JSON, not an object, or beyond the JSON limits
        parsed = {}
    return PendingCall(call.id, call.function.name, parsed)


async def approve(hook: ApprovalHook | None, call: ToolCall,
                  text: FailureText = default_failure_text) -> ToolCallApprovedEvent | ToolResult | Defer:
    """Approval, in one place: the call with its final arguments, or the error result the
    model sees instead (denied, no decision, or the hook failed), worded by ``text``; or the
    hook's :class:`Defer` (the caller keeps the call for a later decision)."""
    if hook is None:
        return ToolCallApprovedEvent(call.id, call.function.name, call.function.arguments)
    try:
        decision: ApprovalDecision | Any = hook(pending_call(call))
        if inspect.isawaitable(decision):
            decision = await decision
    except Exception as e:
        log.exception("kimik3: the approval hook failed")
        return ToolResult.from_failure(failures.approval_failed(e), text)
    if isinstance(decision, Defer):
        return decision
    return apply_decision(decision, call, text)


def apply_decision(decision: Any, call: ToolCall, text: FailureText = default_failure_text
                   ) -> ToolCallApprovedEvent | ToolResult:
    """A decision (the hook's, or one recorded in the session) on ``call``: the call with its
    final arguments, or the error result the model sees (denied; an :class:`Edit` whose
    arguments are not JSON data; anything that is no decision)."""
    name = call.function.name
    if isinstance(decision, Deny):
        return ToolResult.from_failure(failures.denied(decision.reason), text)
    if isinstance(decision, Edit):
        try:
            if not isinstance(decision.arguments, dict):
                raise JSONLimitError(f"expected a dict, got {type(decision.arguments).__name__}")
            check_json_limits(decision.arguments)
        except JSONLimitError as e:
            log.error("kimik3: approval hook returned Edit with unusable arguments: %s", e)
            return ToolResult.from_failure(failures.edit_not_json(e), text)
        return ToolCallApprovedEvent(call.id, name, decision.arguments, edited=True)
    if isinstance(decision, Allow):
        return ToolCallApprovedEvent(call.id, name, call.function.arguments)
    log.error("kimik3: approval hook returned %r; expected Allow(), Deny(...), Edit(...) or Defer()", decision)
    return ToolResult.from_failure(failures.no_decision(), text)


def edit_note(result: ToolResult, approved: ToolCallApprovedEvent) -> ToolResult:
    """``result`` of a call whose arguments a person edited, with the note the model reads first
    (``[the user edited the arguments to {...}]``); ``result`` itself otherwise."""
    if not approved.edited:
        return result
    note = f"[the user edited the arguments to {json.dumps(approved.arguments, ensure_ascii=False)}]\n"
    return ToolResult(content=note + result.text if isinstance(result.content, str)
                      else [TextPart(text=note), *result.content], is_error=result.is_error)
