"""Approval of a tool call, in one place (:class:`~kimik3.agents.Agent`'s ``approval`` hook)."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from .._exceptions import JSONLimitError
from .._json import check_json_limits
from ..tools import ToolResult
from ..tools import _failures as failures
from ..tools._failures import FailureText, default_failure_text
from ..types import ToolCall
from ._types import Allow, ApprovalDecision, ApprovalHook, Deny, Edit, PendingCall, ToolCallApprovedEvent

__all__ = ["approve"]

log = logging.getLogger("kimik3.agent")


async def approve(hook: ApprovalHook | None, call: ToolCall,
                  text: FailureText = default_failure_text) -> ToolCallApprovedEvent | ToolResult:
    """Approval, in one place: the call with its final arguments, or the error result the
    model sees instead (denied, no decision, or the hook failed), worded by ``text``."""
    name = call.function.name
    if hook is None:
        return ToolCallApprovedEvent(call.id, name, call.function.arguments)
    try:
        parsed = call.function.parsed_arguments()
    except ValueError:  # not JSON, not an object, or beyond the JSON limits
        parsed = {}
    try:
        decision: ApprovalDecision | Any = hook(PendingCall(call.id, name, parsed))
        if inspect.isawaitable(decision):
            decision = await decision
    except Exception as e:
        log.exception("kimik3: the approval hook failed")
        return ToolResult.from_failure(failures.approval_failed(e), text)
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
    log.error("kimik3: approval hook returned %r; expected Allow(), Deny(...) or Edit(...)", decision)
    return ToolResult.from_failure(failures.no_decision(), text)
