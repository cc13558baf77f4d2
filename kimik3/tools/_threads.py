"""The threads sync tool calls run in: daemon workers kept for reuse (:func:`call_in_thread`).

Starting an OS thread per call costs a few hundred microseconds and ``Thread.start()`` blocks the
event loop until the thread runs; a worker that finished a call waits for the next one instead
(up to :data:`IDLE_SECONDS`, at most :data:`MAX_IDLE` of them). The guarantee is the one of a
thread per call: cancelling the caller (a time limit, the run) returns at once and the worker is
*abandoned* — it runs on until the function returns, is never handed another call, and being a
daemon never keeps the interpreter from exiting (``anyio.to_thread`` would hold a thread limiter
token and a non-daemon thread instead). While it runs a call a worker is named ``kimik3 tool
<name>``; idle, :data:`IDLE_NAME`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from ._limits import CURRENT_CALL, CallToken

__all__ = ["IDLE_NAME", "IDLE_SECONDS", "MAX_IDLE", "call_in_thread"]

_T = TypeVar("_T")

IDLE_SECONDS = 10.0
"""How long an idle worker waits for another call before it ends (anyio's workers wait as long)."""

MAX_IDLE = 8
"""Idle workers kept at most; a worker finishing a call beyond them ends."""

IDLE_NAME = "kimik3 idle tool worker"
"""The name of a worker between calls."""

_Job = Callable[[], Callable[[], None] | None]
"""Runs one call; returns what tells its caller it is done, or None: the caller left while the
call ran (the worker was abandoned) and the worker must end."""


class _Workers:
    """The process's idle workers (each an inbox it waits on), under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []

    def submit(self, job: _Job, name: str) -> None:
        """Hand ``job`` to an idle worker, or to a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), name=name, daemon=True).start()
        inbox.put(job)

    def _work(self, inbox: queue.SimpleQueue[_Job]) -> None:
        me = threading.current_thread()
        while True:
            try:
                job = inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if any(box is inbox for box in self._idle):
                        self._idle = [box for box in self._idle if box is not inbox]
                        return
                job = inbox.get()  # taken from the idle list meanwhile: its call is on the way
            notify = job()
            if notify is None:
                return  # abandoned: never handed another call
            me.name = IDLE_NAME
            with self._lock:  # idle again before the caller hears: its next call finds this worker
                keep = len(self._idle) < MAX_IDLE
                if keep:
                    self._idle.append(inbox)
            notify()
            if not keep:
                return

    def reset(self) -> None:
        """Forget every worker (a forked child has none of its parent's threads)."""
        self._lock = threading.Lock()
        self._idle = []


_WORKERS = _Workers()
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_WORKERS.reset)


async def call_in_thread(function: Callable[[], _T], name: str, call: CallToken | None = None) -> _T:
    """Run ``function`` in a worker thread and await its result (or its exception).

    Unlike ``anyio.to_thread.run_sync``, cancelling the caller returns at once: the worker is
    abandoned (Python cannot kill a thread) and, being a daemon, never blocks interpreter exit;
    ``call`` (the thread's :data:`~kimik3.tools._limits.CURRENT_CALL`) is marked abandoned then,
    so the file tools write nothing afterwards. The caller's context variables are copied into
    the thread.

    Args:
        function: the call (no arguments).
        name: the tool's name (the worker is named ``kimik3 tool <name>`` while it runs it).
        call: the call's :class:`~kimik3.tools._limits.CallToken`.

    Raises:
        Whatever ``function`` raised; the caller's cancellation.
    """
    token = anyio.lowlevel.current_token()
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # another backend (trio)
        loop = None
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []
    abandoned: list[bool] = []
    context = contextvars.copy_context()
    context.run(CURRENT_CALL.set, call)
    thread_name = f"kimik3 tool {name}"

    def notify() -> None:
        with contextlib.suppress(Exception):  # the event loop is gone: nobody waits any more
            if loop is not None:
                loop.call_soon_threadsafe(done.set)  # does not wait for the loop
            else:
                anyio.from_thread.run_sync(done.set, token=token)

    def job() -> Callable[[], None] | None:
        threading.current_thread().name = thread_name
        try:
            outcome.append((True, context.run(function)))
        except BaseException as e:  # handed to the awaiting task
            outcome.append((False, e))
        return None if abandoned else notify

    _WORKERS.submit(job, thread_name)
    try:
        await done.wait()
    except BaseException:  # cancelled (a time limit, the run): the worker is abandoned
        abandoned.append(True)
        if call is not None and not outcome:
            call.abandon()
        raise
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value
