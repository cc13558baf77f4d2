"""Sync tool calls run on reused daemon workers (issue 30, item 1): no OS thread started per call
(``Thread.start()`` blocked the event loop each time), with the guarantee of a thread per call: a
call over its limit returns at once and its worker is abandoned, never handed another call."""

from __future__ import annotations

import contextvars
import os
import threading

import anyio
import pytest

from kimik3 import ToolResult, tool
from kimik3.tools import _threads

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


@tool
def where() -> str:
    """The thread that runs the call, and the caller's context variable."""
    return f"{threading.get_ident()} {threading.current_thread().name} {threading.current_thread().daemon} {WHO.get()}"


async def test_sequential_calls_reuse_one_daemon_worker() -> None:
    WHO.set("the caller")
    out = [(await where.run({})).text for _ in range(20)]
    idents = {line.split()[0] for line in out}
    assert len(idents) == 1  # one worker for 20 calls (before: 20 threads)
    assert out[0].split(" ", 1)[1] == "kimik3 tool where True the caller"  # named while it runs; a daemon
    worker = next(t for t in threading.enumerate() if str(t.ident) in idents)
    assert worker.name == _threads.IDLE_NAME and worker.daemon  # idle between calls


async def test_concurrent_calls_get_a_worker_each() -> None:
    barrier = threading.Barrier(3, timeout=60)

    @tool
    def meet() -> int:
        """Wait for the others."""
        barrier.wait()  # all three run at once, or this raises
        return threading.get_ident()

    results: list[ToolResult] = []

    async def one() -> None:
        results.append(await meet.run({}))

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(one)
    assert len({r.text for r in results}) == 3 and not any(r.is_error for r in results)


async def test_an_abandoned_worker_is_never_handed_another_call_and_ends_when_its_function_returns() -> None:
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> int:
        """Blocks until released."""
        release.wait(60)
        return threading.get_ident()

    timed_out = await stuck.run({})
    assert timed_out.is_error and "stuck did not finish within 0.2 s and was abandoned" in timed_out.text
    [abandoned] = [t for t in threading.enumerate() if t.name == "kimik3 tool stuck"]
    for _ in range(5):  # later calls run elsewhere while the abandoned one is still blocked
        assert (await where.run({})).text.split()[0] != str(abandoned.ident)
    release.set()
    abandoned.join(60)
    assert not abandoned.is_alive()  # it ended instead of going back to the pool


async def test_idle_workers_end_after_their_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "IDLE_SECONDS", 0.05)
    ident = int((await where.run({})).text.split()[0])  # back in the pool, it waits 0.05 s
    worker = next(t for t in threading.enumerate() if t.ident == ident)
    worker.join(60)
    assert not worker.is_alive()
    assert (await where.run({})).text.endswith(" kimik3 tool where True nobody")  # a new worker then


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
async def test_a_forked_child_starts_its_own_workers() -> None:
    """The parent's idle workers do not exist in a forked child: handing them a call would hang."""
    await where.run({})  # the parent has an idle worker now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            text = anyio.run(where.run, {}).text
            os.write(w, text.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        got = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and got.split(" ", 1)[1] == "kimik3 tool where True nobody"
