"""The process that ``bash`` runs its shell under: a child subreaper that can end every descendant.

Run as ``python -I -S _reaper.py FD SHELL ARGS...`` (source kept importable so it is linted and
typed). It makes itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a
descendant orphaned by its parent, ``setsid`` / double-fork daemons included, is re-parented to
it instead of to init, so it can always find them. It runs the shell with stdin ``/dev/null`` and
reports on descriptor ``FD``:

- ``exit N``: the shell's exit code (``-S`` for signal ``S``), when the shell ends;
- ``noreaper``: the kernel refused ``prctl`` (not Linux): descendants that leave the process
  group cannot be found;
- ``survivors PID...``: processes still alive after SIGKILL (uninterruptible sleep, other user).

Its own stdin is the control channel: ``k`` kills every descendant (SIGTERM, a grace second, then
SIGKILL); end of file (the caller is done, or gone) leaves background processes running.
SIGTERM kills every descendant the same way; SIGUSR1 does it with SIGKILL at once.

``python -I -S _reaper.py --stdio CMD ARGS...`` runs an MCP stdio server (kimik3.tools.mcp)
instead: CMD gets this process's stdin, stdout and stderr (the reaper keeps none of them open);
when CMD ends, or on SIGTERM (the MCP SDK's shutdown), every descendant is killed as above and the
reaper exits with CMD's exit code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_status_fd = -1


class _Kill(Exception):
    def __init__(self, grace: float) -> None:
        self.grace = grace


def _on_signal(signum: int, frame: object) -> None:
    raise _Kill(0.0 if signum == signal.SIGUSR1 else 1.0)


def _descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    live: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
            if fields[0] not in (b"Z", b"X"):
                live.add(int(entry))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return [p for p in found if p in live]


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_all(grace: float) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    me = os.getpid()
    steps = ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)) if grace > 0 else ((signal.SIGKILL, 2.0),)
    for sig, wait in steps:
        for pid in _descendants(me):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while True:
            _reap()
            if not _descendants(me) or time.monotonic() >= end:
                break
            time.sleep(0.01)
        # a process forked between the listing and the signal is caught by the next round
        for pid in _descendants(me):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    _reap()
    left = _descendants(me)
    if left:
        os.write(_status_fd, ("survivors " + " ".join(map(str, left)) + "\n").encode())


def _subreaper() -> bool:
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stdio(argv: list[str]) -> None:
    """``--stdio CMD ARGS``: see the module docstring."""
    global _status_fd
    _status_fd = 2  # "survivors ..." goes to the server's stderr
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR1, _on_signal)
    _subreaper()
    code = 0
    try:
        server = os.fork()
        if server == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)
            try:
                os.execvp(argv[0], argv)
            except OSError as e:
                os.write(2, f"kimik3: cannot run {argv[0]!r}: {e}\n".encode())
            os._exit(127)
        null = os.open(os.devnull, os.O_RDWR)  # the pipes are the server's: its end of file is its own
        os.dup2(null, 0)
        os.dup2(null, 1)
        while True:  # orphans re-parented here are reaped on the way
            pid, status = os.waitpid(-1, 0)
            if pid == server:
                code = os.waitstatus_to_exitcode(status)
                break
        _kill_all(1.0)
    except _Kill as kill:
        _kill_all(kill.grace)
    os._exit(code if code >= 0 else 128 - code)


def main(argv: list[str]) -> None:
    global _status_fd
    if argv[:1] == ["--stdio"]:
        _stdio(argv[1:])
    _status_fd, argv = int(argv[0]), argv[1:]
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR1, _on_signal)
    reaper = _subreaper()
    os.set_inheritable(_status_fd, False)
    try:
        shell = os.fork()
        if shell == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            try:
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        null = os.open(os.devnull, os.O_WRONLY)  # the output pipe is the shell's, not ours
        os.dup2(null, 1)
        os.dup2(null, 2)
        if not reaper:
            os.write(_status_fd, b"noreaper\n")
        _, status = os.waitpid(shell, 0)
        os.write(_status_fd, b"exit %d\n" % os.waitstatus_to_exitcode(status))
        while True:
            word = os.read(0, 1)
            if word == b"k":
                _kill_all(1.0)
            if word != b"":
                continue
            break
    except _Kill as kill:
        _kill_all(kill.grace)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
