"""``bash``'s process handling: run a shell in its own process group, collect capped output,
kill the whole group on timeout or cancellation."""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import anyio

from .._truncate import _truncate, truncate_middle

_TERM_GRACE_S = 1.0  # SIGTERM -> SIGKILL
_PIPE_GRACE_S = 1.0  # how long the output may stay open after the shell itself exited
_POLL_S = 0.05
_READ_CHUNK = 65536
_MAX_READ_PER_POLL = 1 << 20


class _HeadTail:
    """Keeps the first and the last ``cap`` characters of a byte stream decoded as UTF-8."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.dropped = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        s = self._decoder.decode(data, final)
        if self.head_len < self.cap:
            take = s[: self.cap - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            s = s[len(take) :]
        if s:
            self.tail += s
            if len(self.tail) > self.cap:
                self.dropped += len(self.tail) - self.cap
                self.tail = self.tail[-self.cap :]

    def text(self) -> str:
        self.feed(b"", final=True)
        full = "".join(self.head) + self.tail
        if self.dropped:
            return _truncate(full, self.cap, self.dropped)
        return truncate_middle(full, self.cap)


def _drain(fd: int, out: _HeadTail) -> bool:
    """Read what the pipe holds now (at most ~1 MiB); True at end of file."""
    read = 0
    while read < _MAX_READ_PER_POLL:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not chunk:
            return True
        out.feed(chunk)
        read += len(chunk)
    return False


def _group_members(pgid: int) -> list[int] | None:
    """Pids of the live (not zombie) processes of group ``pgid``, from ``/proc``; None without
    a Linux ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` has a live member (zombies left to a non-reaping init don't count)."""
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member changed credentials
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _kill_group(proc: subprocess.Popen[bytes], fd: int, out: _HeadTail, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap the shell.

    The group id is the shell's pid (``start_new_session=True``); the group cannot be reused
    while the unreaped shell or any member exists. Output still in the pipe is read, but never
    waited for: a process that escaped the group may hold the pipe forever.
    """
    pgid = proc.pid
    if grace > 0:
        _signal_group(pgid, signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end:
            _drain(fd, out)
            proc.poll()
            if not _group_alive(pgid):
                break
            await anyio.sleep(_POLL_S)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
    for _ in range(200):  # SIGKILL takes effect at once; reap the shell, see the group gone (<= ~2 s)
        if proc.poll() is not None and not _group_alive(pgid):
            break
        await anyio.sleep(0.01)
    _drain(fd, out)


async def _run_shell(
    argv: list[str], cwd: Path, timeout: float, max_chars: int
) -> tuple[str, int | None, float, bool]:
    """(output, exit status or None on timeout, seconds, background processes were killed)."""
    start = time.monotonic()
    proc = subprocess.Popen(  # fork/exec only; fast enough to call from the event loop
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    out = _HeadTail(max_chars)
    deadline = start + timeout
    eof = timed_out = killed_background = False
    exited_at: float | None = None
    try:
        while True:
            if not eof:
                eof = _drain(fd, out)
            exited = proc.poll() is not None
            if eof and exited:
                break
            now = time.monotonic()
            if exited:  # the shell is gone but something still holds its output pipe
                exited_at = now if exited_at is None else exited_at
                if now - exited_at >= _PIPE_GRACE_S or now >= deadline:
                    killed_background = True
                    break
            elif now >= deadline:
                timed_out = True
                break
            wait = min(deadline - now, _POLL_S)
            if eof:
                await anyio.sleep(min(wait, 0.005))  # output closed; waiting for the exit status
            else:
                with anyio.move_on_after(wait):
                    await anyio.wait_readable(fd)
        if timed_out or killed_background:
            await _kill_group(proc, fd, out, _TERM_GRACE_S)
    except BaseException:  # cancelled: kill everything at once, then let the cancellation go on
        with anyio.CancelScope(shield=True):
            await _kill_group(proc, fd, out, 0.0)
        raise
    finally:
        proc.stdout.close()
    elapsed = time.monotonic() - start
    rc = proc.returncode
    status = None if timed_out or rc is None else (rc if rc >= 0 else 128 - rc)
    return out.text(), status, elapsed, killed_background
