"""Cancellation of tool calls: the rule that tells a tool's own ``CancelledError`` from a
cancellation of its caller (time limits and abandoned threads are in :mod:`kimik3.tools._tool`)."""

from __future__ import annotations

import asyncio
import math
import sys

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - a backport anyio depends on there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["STRAY_NOTE", "stray_cancellation", "unwrap_group"]

STRAY_NOTE = "(raised by the code itself: nothing cancelled it)"
"""Appended to the error result of a stray ``CancelledError`` (see :func:`stray_cancellation`)."""


def stray_cancellation(exc: BaseException, *, scoped: bool = False) -> bool:
    """Whether ``exc`` is an ``asyncio.CancelledError`` that code *raised itself* while nothing
    cancelled the running task (a tool's own bug, a cancelled sub-task it awaited, a sync function
    raising it in its thread). Such an error is that code's failure, not a cancellation: a tool
    call gets an error result and its sibling calls go on. A real cancellation (the task's
    ``cancelling()`` count is above zero: a cancel scope, a time budget, Ctrl-C) returns False.

    Args:
        exc: what was raised.
        scoped: the task is an anyio task-group child (as the agent's tool calls are), so every
            real cancellation reaches it through a cancelled anyio scope: without one, even a
            cancel of the task itself (a tool calling ``current_task().cancel()``) is stray, and
            that cancel request is withdrawn (``uncancel``) so the task goes on.

    On Python 3.10 (no ``Task.cancelling``) only ``scoped`` callers can tell: otherwise every
    ``CancelledError`` counts as a real cancellation, as before.
    """
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not in asyncio (trio): an asyncio CancelledError is never a cancel
        return True
    if task is None:
        return True
    unscoped = scoped and anyio.current_effective_deadline() != -math.inf  # no cancelled scope around
    if sys.version_info < (3, 11):  # no cancel count: only a scope can tell
        return unscoped
    if task.cancelling() == 0:
        return True
    if unscoped:
        while task.cancelling():
            task.uncancel()
        return True
    return False

def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to re-raise for a task group's: its only exception, else the group."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(reversed(exc.exceptions))
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group
