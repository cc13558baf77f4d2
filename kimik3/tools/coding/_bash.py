"""``bash``'s process handling: run a shell in the run's sandbox under its own reaper (``_sandbox``,
``_reaper``), with an environment where editors, pagers and prompts fail fast; collect capped
output without terminal escape sequences; end every process it started on timeout or
cancellation; say what it left running and which limit it reached."""

from __future__ import annotations

import codecs
import os
import re
import time
from dataclasses import dataclass, field

import anyio

from .._truncate import _truncate, truncate_middle
from ._sandbox import Command, Sandbox

_TERM_GRACE_S = 1.0  # SIGTERM -> SIGKILL
_PIPE_GRACE_S = 1.0  # how long the output may stay open after the shell itself exited
_POLL_S = 0.05
_READ_CHUNK = 65536
_MAX_READ_PER_POLL = 1 << 20
_REAPER_KILL_S = 3.0  # the reaper's own SIGKILL round and reaping
_SIGXCPU, _SIGXFSZ = 24, 25  # Linux numbers (the signals of RLIMIT_CPU and RLIMIT_FSIZE)

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
        left: pids (as the command saw them) still running after it, ended with the run.
        limit: "processes N" when the command reached the process limit and was killed.
        note: a line about the sandbox itself (it had to be restarted), or None.
    """

    output: str
    status: int | None
    seconds: float
    killed_background: bool
    survivors: list[int] = field(default_factory=list)
    contained: bool = True
    left: list[int] = field(default_factory=list)
    limit: str | None = None
    note: str | None = None


async def _wait(fd: int, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await anyio.wait_readable(fd)


async def _end_all(cmd: Command, out: _HeadTail, grace: float) -> None:
    """End every process of ``cmd``: its reaper kills them (SIGTERM, ``grace`` seconds, SIGKILL;
    at once with ``grace`` 0) and exits; if it does not (a command killed it), the supervisor
    SIGKILLs its tree and whatever still holds the output pipe. Output still in the pipe is read,
    never waited for."""
    end = time.monotonic() + grace + _REAPER_KILL_S
    if cmd.send(b"t" if grace > 0 else b"k"):
        while not cmd.closed and time.monotonic() < end:
            _drain(cmd.output, out)
            await _wait(cmd.status_fd, 0.01)
            cmd.poll()
    eof = _drain(cmd.output, out)
    if not cmd.closed or not eof:
        cmd.kill()
        end = time.monotonic() + 2.0
        while not eof and time.monotonic() < end:
            await _wait(cmd.output, 0.01)
            eof = _drain(cmd.output, out)
    cmd.poll()


async def _left_running(cmd: Command) -> list[int]:
    """The processes the command left running (its reaper still has descendants), if any."""
    cmd.poll()
    if cmd.closed or not cmd.send(b"q"):
        return []
    end = time.monotonic() + 2.0
    while cmd.left is None and not cmd.closed and time.monotonic() < end:
        await _wait(cmd.status_fd, 0.05)
        cmd.poll()
    return cmd.left or []


async def run_shell(sandbox: Sandbox, argv: list[str], timeout: float, max_chars: int) -> ShellResult:
    """Run ``argv`` (a shell) in ``sandbox`` with :func:`shell_env`; see :class:`ShellResult`.

    Args:
        sandbox: where the command runs.
        argv: the shell and its arguments (``[shell, "-c", command]``).
        timeout: seconds until the command's process group is stopped.
        max_chars: the most characters of output kept (head and tail).

    Raises:
        ToolError: the sandbox cannot be started.
    """
    start = time.monotonic()
    cmd = sandbox.spawn(argv, shell_env(), grace=_TERM_GRACE_S)
    out = _HeadTail(max_chars)
    deadline = start + timeout
    eof = timed_out = killed_background = False
    exited_at: float | None = None
    left: list[int] = []
    try:
        while True:
            if not eof:
                eof = _drain(cmd.output, out)
            cmd.poll()
            exited = cmd.exit_code is not None or cmd.closed
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
            await _wait(cmd.status_fd if eof else cmd.output, min(deadline - now, _POLL_S))
        if timed_out or killed_background:
            await _end_all(cmd, out, _TERM_GRACE_S)
        else:
            left = await _left_running(cmd)
    except BaseException:  # cancelled: kill everything at once, then let the cancellation go on
        with anyio.CancelScope(shield=True):
            await _end_all(cmd, out, 0.0)
        raise
    finally:
        cmd.close()
    note = cmd.note
    if cmd.error is not None:
        note = f"[the command could not be started: {cmd.error}]"
    elif cmd.exit_code is None and not timed_out and not cmd.limit:
        note = note or "[the command's reaper was killed, so its exit status is unknown]"
    code = cmd.exit_code if cmd.exit_code is not None else -9
    status = None if timed_out else (code if code >= 0 else 128 - code)
    return ShellResult(strip_escapes(out.text()), status, time.monotonic() - start, killed_background,
                       cmd.survivors, cmd.contained, left, cmd.limit, note)


def result_lines(done: ShellResult, timeout: int, sandbox: Sandbox) -> list[str]:
    """The lines of ``bash``'s result after its output: what was killed, left running or limited,
    then "[exit code: N, T s]" or "[timed out after T s; process group killed]"."""
    lines = [done.note] if done.note else []
    lines += [f"[{note}]" for note in sandbox.restore_git_links()]
    if done.limit:
        lines.append(f"[the command reached the limit of {done.limit.split()[-1]} processes; all of its processes "
                     "were killed]")
    if done.killed_background:
        lines.append("[background processes holding the output were killed]")
    if done.survivors:
        lines.append(f"[these processes survived the kill: {' '.join(map(str, done.survivors))}]")
    elif not done.contained and (done.status is None or done.killed_background):
        lines.append("[processes that left the process group (setsid) may still be running]")
    if done.left and sandbox.mode != "landlock":  # there, restore_git_links ended them
        lines.append(f"[still running after the command: {' '.join(map(str, done.left))}; they end when the run ends]")
    limits = sandbox.limits
    if done.status == 128 + _SIGXCPU and limits.cpu_seconds:
        lines.append(f"[killed at the CPU time limit ({limits.cpu_seconds} s per process)]")
    elif done.status == 128 + _SIGXFSZ and limits.file_bytes:
        lines.append(f"[killed at the file size limit ({limits.file_bytes} bytes per file)]")
    if done.status is None:
        lines.append(f"[timed out after {timeout} s; process group killed]")
    else:
        lines.append(f"[exit code: {done.status}, {done.seconds:.2f} s]")
    return lines
