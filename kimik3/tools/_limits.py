"""Cancellation of tool calls: the rule that tells a tool's own ``CancelledError`` from a
cancellation of its caller, and the liveness of a sync call whose thread may be abandoned (time
limits and the threads themselves are in :mod:`kimik3.tools._tool`).

An abandoned thread runs on (Python cannot kill a thread), so a tool that changes files must not
change them once its call was reported as over. :class:`CallToken` is the rule: the file tools
call :func:`commit_point` just before their first change to the disk; once the call is abandoned
that raises, and once it passed the call is *committing* and abandoning it says so in the result
(``"... was abandoned after it had begun writing its changes ..."``).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import sys
import threading
from typing import Literal

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - a backport anyio depends on there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["STRAY_NOTE", "CallToken", "commit_point", "stray_cancellation", "unwrap_group"]

STRAY_NOTE = "(raised by the code itself: nothing cancelled it)"
"""Appended to the error result of a stray ``CancelledError`` (see :func:`stray_cancellation`)."""


class CallToken:
    """The liveness of one sync tool call running in its own thread.

    ``state`` is ``"live"`` until the call is either abandoned (:meth:`abandon`: its time limit
    passed, or its caller was cancelled) or starts changing things (:meth:`commit`); the two
    exclude each other, under a lock, so a call never writes after it was reported abandoned.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state: Literal["live", "abandoned", "committing"] = "live"

    def abandon(self) -> Literal["abandoned", "committing"]:
        """Mark the call abandoned unless it already began committing; returns the state."""
        with self._lock:
            if self.state == "committing":
                return "committing"
            self.state = "abandoned"
            return "abandoned"

    def commit(self) -> None:
        """Enter the commit (again: no-op).

        Raises:
            ToolError: the call was abandoned; nothing may be changed any more.
        """
        with self._lock:
            if self.state == "abandoned":
                from .._exceptions import ToolError

                raise ToolError("the call was abandoned (its time limit passed) before it wrote anything; "
                                "nothing was written")
            self.state = "committing"


CURRENT_CALL: contextvars.ContextVar[CallToken | None] = contextvars.ContextVar("kimik3_tool_call", default=None)
"""The :class:`CallToken` of the sync tool call running in this thread (None elsewhere)."""


def commit_point() -> None:
    """Call just before a tool's first change to the disk (a file created, renamed, removed):
    raises :class:`~kimik3.ToolError` when the call was abandoned meanwhile; afterwards an
    abandoned call is reported as having begun its changes. Outside a sync tool call: no-op."""
    token = CURRENT_CALL.get()
    if token is not None:
        token.commit()


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

    An exception group (a task group inside the tool) counts the same way when it holds a
    ``CancelledError`` and otherwise only the tool's own failures (``Exception``, ``SystemExit``,
    ``GeneratorExit``): ``BaseExceptionGroup([CancelledError()])`` raised while nothing cancels
    the task is the tool's error, not the run's cancellation. A group holding a
    ``KeyboardInterrupt`` is never stray.

    On Python 3.10 (no ``Task.cancelling``) only ``scoped`` callers can tell: otherwise every
    ``CancelledError`` counts as a real cancellation, as before.
    """
    if isinstance(exc, BaseExceptionGroup):
        leaves = _leaves(exc)
        own = (Exception, SystemExit, GeneratorExit, asyncio.CancelledError)
        if not all(isinstance(leaf, own) for leaf in leaves):
            return False
        if not any(isinstance(leaf, asyncio.CancelledError) for leaf in leaves):
            return False
    elif not isinstance(exc, asyncio.CancelledError):
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


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of a (nested) exception group, in order."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(reversed(exc.exceptions))
        else:
            leaves.append(exc)
    return leaves


def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to re-raise for a task group's: its only exception, else the group."""
    leaves = _leaves(group)
    return leaves[0] if len(leaves) == 1 else group
