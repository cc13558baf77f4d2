"""``bash``'s process handling: run a shell in a fresh session under a subreaper (``_reaper``),
with an environment where editors, pagers and prompts fail fast; collect capped output without
terminal escape sequences; end every process it started on timeout or cancellation."""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from .._truncate import _truncate, truncate_middle

_TERM_GRACE_S = 1.0  # SIGTERM -> SIGKILL
_PIPE_GRACE_S = 1.0  # how long the output may stay open after the shell itself exited
_POLL_S = 0.05
_READ_CHUNK = 65536
_MAX_READ_PER_POLL = 1 << 20
_REAPER_KILL_S = 3.0  # the reaper's own SIGKILL round and reaping
_REAPER = str(Path(__file__).with_name("_reaper.py"))

_NO_EDITOR = (
    "sh -c 'echo \"kimik3: no interactive editor here (asked to edit $0). Give the text on the command "
    "line instead: git commit -m MSG, git merge --no-edit, git rebase without -i.\" >&2; exit 1'"
)
_NO_PROMPT = "false"
# Vim (vi, view, vimdiff, rvim, ex; Neovim too) run directly: it reads $VIMINIT first, and with no
# terminal it quits at once, with an error exit code, instead of painting a screen until the
# timeout. ``vim -es`` / ``ex -s`` (scripted) skip $VIMINIT and still work.
_NO_VIM = (
    "if !has('ttyin') || !has('ttyout') | call writefile(['kimik3: no interactive editor here (vim needs a "
    "terminal). Edit files with the file tools, or script it: vim -es, ex -s, sed -i.'], '/dev/stderr') | cquit | endif"
)
# What makes interactive programs fail fast instead of waiting for a terminal that is not there.
# There is no controlling terminal either (a new session), so /dev/tty prompts (sudo, ssh) fail.
_FAIL_FAST_ENV = {
    "EDITOR": _NO_EDITOR,
    "VISUAL": _NO_EDITOR,
    "GIT_EDITOR": _NO_EDITOR,
    "GIT_SEQUENCE_EDITOR": _NO_EDITOR,
    "GIT_MERGE_AUTOEDIT": "no",
    "VIMINIT": _NO_VIM,
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": _NO_PROMPT,
    "SSH_ASKPASS": _NO_PROMPT,
    "SSH_ASKPASS_REQUIRE": "never",
    "GCM_INTERACTIVE": "never",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
}
# ECMA-48 escape sequences: CSI (colours, cursor), OSC (titles, links), nF (charsets), two-byte ones.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]+[0-~]|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)


def shell_env() -> dict[str, str]:
    """The environment of ``bash``'s shell: this process's, with :data:`_FAIL_FAST_ENV` on top."""
    return {**os.environ, **_FAIL_FAST_ENV}


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves, titles)."""
    return _ESCAPES.sub("", text) if "\x1b" in text or "\x9b" in text else text


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


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


@dataclass
class ShellResult:
    """What one ``bash`` call did.

    Attributes:
        output: merged stdout / stderr, capped, escape sequences removed.
        status: the shell's exit code (128+S for signal S), or None when it timed out.
        seconds: wall time of the call.
        killed_background: processes still holding the output after the shell exited were killed.
        survivors: pids still alive after the kill (uninterruptible sleep, another user).
        contained: whether every descendant could be found (a subreaper); when False, processes
            that left the process group (``setsid``) may survive a kill unseen.
    """

    output: str
    status: int | None
    seconds: float
    killed_background: bool
    survivors: list[int] = field(default_factory=list)
    contained: bool = True


class _Status:
    """The reaper's reports (see ``_reaper``), read without blocking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.exit_code: int | None = None
        self.survivors: list[int] = []
        self.contained = True
        self.closed = False  # the reaper has exited (end of file)

    def poll(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.fd, 4096):
                self.buffer += chunk
            self.closed = True
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            word, _, rest = line.decode("ascii", "replace").partition(" ")
            if word == "exit":
                self.exit_code = int(rest)
            elif word == "survivors":
                self.survivors = [int(p) for p in rest.split()]
            elif word == "noreaper":
                self.contained = False


async def _end_all(proc: subprocess.Popen[bytes], fd: int, out: _HeadTail, status: _Status, grace: float) -> None:
    """End every process the shell started: the reaper kills its descendants (SIGTERM, ``grace``
    seconds, SIGKILL; at once with ``grace`` 0) and exits; the process group is SIGKILLed after
    it as a fallback. Output still in the pipe is read, never waited for."""
    pgid = proc.pid  # the reaper leads the group (``start_new_session=True``)
    if grace > 0:
        _signal(pgid, signal.SIGTERM)
        _signal_group(pgid, signal.SIGTERM)
    else:
        _signal(pgid, signal.SIGUSR1)
    end = time.monotonic() + grace + _REAPER_KILL_S
    while time.monotonic() < end and proc.poll() is None:
        _drain(fd, out)
        await anyio.sleep(0.01)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
    for _ in range(200):  # SIGKILL takes effect at once; reap the reaper, see the group gone (<= ~2 s)
        if proc.poll() is not None and not _group_alive(pgid):
            break
        await anyio.sleep(0.01)
    _drain(fd, out)
    status.poll()


async def _run_shell(argv: list[str], cwd: Path, timeout: float, max_chars: int) -> ShellResult:
    """Run ``argv`` (a shell) under the reaper with :func:`shell_env`; see :class:`ShellResult`."""
    start = time.monotonic()
    status_r, status_w = os.pipe()
    try:
        proc = subprocess.Popen(  # fork/exec only; fast enough to call from the event loop
            [sys.executable, "-I", "-S", _REAPER, str(status_w), *argv],
            cwd=cwd,
            env=shell_env(),
            stdin=subprocess.PIPE,  # the reaper's control channel; the shell's stdin is /dev/null
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(status_w,),
            start_new_session=True,
        )
    finally:
        os.close(status_w)
    os.set_blocking(status_r, False)
    status = _Status(status_r)
    assert proc.stdout is not None and proc.stdin is not None
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
            status.poll()
            exited = status.exit_code is not None or proc.poll() is not None
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
            if eof:  # output closed; waiting for the exit status
                with anyio.move_on_after(min(wait, 0.005) if status.closed else wait):
                    await anyio.wait_readable(status.fd)
            else:
                with anyio.move_on_after(wait):
                    await anyio.wait_readable(fd)
        if timed_out or killed_background:
            await _end_all(proc, fd, out, status, _TERM_GRACE_S)
    except BaseException:  # cancelled: kill everything at once, then let the cancellation go on
        with anyio.CancelScope(shield=True):
            await _end_all(proc, fd, out, status, 0.0)
        raise
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # the reaper exits, leaving redirected background processes running
        with anyio.CancelScope(shield=True):
            end = time.monotonic() + 2.0
            while not status.closed and time.monotonic() < end:  # the reaper closes it as it exits
                with anyio.move_on_after(0.05):
                    await anyio.wait_readable(status.fd)
                status.poll()
            if not status.closed:
                _signal(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        status.poll()
        os.close(status_r)
    code = status.exit_code if status.exit_code is not None else proc.returncode
    result_status = None if timed_out or code is None else (code if code >= 0 else 128 - code)
    return ShellResult(
        strip_escapes(out.text()), result_status, time.monotonic() - start, killed_background,
        status.survivors, status.contained,
    )
