"""The processes ``bash`` runs under: one supervisor per run and one reaper per command, each a
child subreaper that can find and end every process it started; and kimik3's one ``/proc``
scanner (:func:`descendants`).

Run as ``python -I -S - supervise FD`` with this source on stdin (kept importable so it is linted and typed;
it imports only the standard library, as it may run inside a sandbox that hides kimik3): by the
host directly (``sandbox="none"``) or as the command of a bubblewrap sandbox (``_sandbox``),
where it runs in a new PID namespace whose processes all die with it.

**Supervisor.** It makes itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``: an
orphaned descendant, ``setsid`` / double-fork daemons included, is re-parented to it instead of
to init) and non-dumpable (a process of the same user cannot ptrace it), sends ``ready`` (or
``ready noreaper`` where the kernel refused) on the SOCK_SEQPACKET socket ``FD``, then serves one
JSON message per request, with file descriptors attached:

- ``{"spawn": ID, "argv": [...], "cwd": DIR, "env": {...}, "rlimits": {"DATA": N, ...},
  "max_processes": N, "grace": S}`` with the fds (output, status, control): fork a reaper;
- ``{"kill": ID}``: SIGKILL what command ID left: its reaper's tree and every process that still
  holds its output pipe (the command may have killed its reaper).

End of file on ``FD`` (the host closed it, or died): every descendant gets SIGTERM, a second,
then SIGKILL, and the supervisor exits.

**Reaper** (one per command, forked by the supervisor): a new session, a child subreaper. It runs
the shell with stdin ``/dev/null``, stdout and stderr the output fd and the rlimits set, and
reports on the status fd, one line each:

- ``exit N``: the shell's exit code (``-S`` for signal ``S``);
- ``left PID...``: the answer to ``q``: the live processes the shell left behind;
- ``limit processes N``: the command reached N processes (``max_processes``): all were killed;
- ``survivors PID...``: processes still alive after SIGKILL (uninterruptible sleep);
- ``noreaper``: the kernel refused ``prctl`` (not Linux): daemons may escape;
- ``error TEXT``: the command could not be started.

Its control fd takes single bytes: ``q`` (query), ``t`` (end everything: SIGTERM, ``grace``
seconds, SIGKILL), ``k`` (SIGKILL at once); end of file changes nothing. The reaper exits when no
descendant is left, so end of file on the status fd means the command and everything it started
are gone.
**MCP stdio servers.** ``python -I -S _reaper.py --stdio CMD ARGS...`` runs an MCP stdio server
(:mod:`kimik3.tools.mcp`) instead: CMD gets this process's stdin, stdout and stderr (the reaper
keeps none of them open); when CMD ends, or on SIGTERM (the MCP SDK's shutdown; ``kimik3 serve``'s
``PR_SET_PDEATHSIG`` when it dies), every descendant is ended as above (SIGTERM, a grace second,
SIGKILL) and the reaper exits with CMD's exit code (143 after SIGTERM). SIGINT is ignored by the
reaper (CMD gets a terminal's Ctrl-C itself; when it ends, so does the rest).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_WATCH_S = 0.1  # the process-count watchdog's period
_KILL_S = 2.0  # how long a SIGKILL round may take
_SHUTDOWN_GRACE_S = 1.0
_MAX_REQUEST = 1 << 20
_FDS_PER_SPAWN = 3
_has_children_files: bool | None = None


def _prctl(option: int, value: int) -> bool:
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after ``pid (comm)``: state, ppid, pgrp, ...; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _children(pid: int) -> list[int]:
    """The children of ``pid``: the ``children`` list of each of its threads."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out  # exited
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += map(int, f.read().split())
        except OSError:
            continue  # the thread exited
    return out


def _children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from a scan of each ``/proc/PID/stat``."""
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and len(fields) > 1:
                by_parent.setdefault(int(fields[1]), []).append(int(entry))
    return by_parent


def descendants(root: int, *, live: bool = False) -> list[int]:
    """Pids of the descendants of ``root``, parents before their children, from ``/proc``.

    Each process's ``/proc/PID/task/TID/children`` list is followed (cost proportional to the
    tree); a kernel without those files gets one scan of every ``/proc/PID/stat``. A process that
    forks or exits meanwhile may be missed or listed: callers that must see none left loop (and
    a subreaper confirms with ``waitpid``).

    Args:
        root: the pid whose descendants are wanted (not included).
        live: leave out zombies (exited, not yet reaped).

    Returns:
        The pids; empty without a Linux ``/proc``.
    """
    global _has_children_files
    if _has_children_files is None:
        _has_children_files = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
    by_parent = None if _has_children_files else _children_by_parent() if os.path.isdir("/proc") else {}
    found: list[int] = []
    todo = [root]
    seen = {root}
    while todo:
        pid = todo.pop()
        for child in _children(pid) if by_parent is None else by_parent.get(pid, ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    if live:
        found = [p for p in found if (f := _stat_fields(p)) is not None and f[0] not in (b"Z", b"X")]
    return found


def _reap(on_exit: Any = None) -> bool:
    """Reap every exited child (``on_exit(pid, status)`` for each); False when none is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if on_exit is not None:
            on_exit(pid, status)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _end_all(grace: float, on_exit: Any = None) -> list[int]:
    """End every descendant: SIGTERM and ``grace`` seconds (skipped when 0), then SIGKILL rounds
    until ``waitpid`` finds no child (a subreaper: then no descendant is left). Returns the live
    ones left after :data:`_KILL_S` (uninterruptible sleep)."""
    me = os.getpid()
    if grace > 0:
        _signal_all(descendants(me), signal.SIGTERM)
        end = time.monotonic() + grace
        while _reap(on_exit) and time.monotonic() < end:
            time.sleep(0.01)
    end = time.monotonic() + _KILL_S
    while True:
        _signal_all(descendants(me), signal.SIGKILL)  # again each round: a fork storm converges
        if not _reap(on_exit):
            return []
        if time.monotonic() >= end:
            return descendants(me, live=True)
        time.sleep(0.005)


def _report(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, line.encode() + b"\n")


def _exec_shell(req: dict[str, Any], out_fd: int) -> None:
    """In the shell's child: default signals, stdin /dev/null, output to ``out_fd``, the rlimits;
    exec ``req["argv"]`` (never returns)."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ; the shell must not
        signal.set_wakeup_fd(-1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        for name, value in req.get("rlimits", {}).items():
            kind = getattr(resource, f"RLIMIT_{name}")
            hard = resource.getrlimit(kind)[1]
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            top = soft + 2 if name == "CPU" else soft  # past the soft CPU limit: SIGXCPU, then SIGKILL
            resource.setrlimit(kind, (soft, top if hard == resource.RLIM_INFINITY else min(top, hard)))
        os.chdir(req["cwd"])
        os.execve(req["argv"][0], req["argv"], req["env"])
    except BaseException as e:  # whatever failed: say it on the output, exit 127
        with contextlib.suppress(OSError):
            os.write(2, f"kimik3: cannot run {req['argv'][0]}: {e}\n".encode())
    os._exit(127)


def _run_command(req: dict[str, Any], out_fd: int, status_fd: int, control_fd: int) -> None:
    """The reaper of one command (see the module docstring); never returns."""
    os.setsid()
    if not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
        _report(status_fd, "noreaper")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    try:
        shell = os.fork()
    except OSError as e:
        _report(status_fd, f"error cannot fork: {e}")
        os._exit(0)
    if shell == 0:
        _exec_shell(req, out_fd)
    os.close(out_fd)
    grace = float(req.get("grace", 1.0))
    limit = req.get("max_processes")

    def on_exit(pid: int, status: int) -> None:
        if pid == shell:
            _report(status_fd, f"exit {os.waitstatus_to_exitcode(status)}")

    def end(grace: float) -> None:
        left = _end_all(grace, on_exit)
        if left:
            _report(status_fd, "survivors " + " ".join(map(str, left)))
        os._exit(0)

    control: int | None = control_fd
    next_watch = time.monotonic() + _WATCH_S
    while True:
        if not _reap(on_exit):
            os._exit(0)  # nothing left: the status pipe closes
        ready, _, _ = select.select([wake_r] + ([control] if control is not None else []), [], [],
                                    max(0.0, next_watch - time.monotonic()))
        with contextlib.suppress(OSError):
            os.read(wake_r, 4096)
        if control is not None and control in ready:
            try:
                data = os.read(control, 64)
            except OSError:
                data = b""
            if not data:
                control = None  # the host is done with it; the processes go on
            for byte in data:
                if byte == ord("q"):
                    _report(status_fd, "left " + " ".join(map(str, descendants(os.getpid(), live=True))))
                elif byte in (ord("t"), ord("k")):
                    end(grace if byte == ord("t") else 0.0)
        if time.monotonic() >= next_watch:
            next_watch = time.monotonic() + _WATCH_S
            if limit and len(descendants(os.getpid())) >= limit:
                _report(status_fd, f"limit processes {limit}")
                end(0.0)


def _pipe_holders(inode: int, among: list[int]) -> list[int]:
    """The pids in ``among`` with a descriptor on the pipe ``inode``."""
    link = f"pipe:[{inode}]"
    holders = []
    for pid in among:
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == link for fd in os.listdir(f"/proc/{pid}/fd")):
                holders.append(pid)
    return holders


def _kill_command(reaper: int, inode: int) -> None:
    """SIGKILL a command's reaper, its tree and whatever holds its output pipe, until none is left
    (at most :data:`_KILL_S`)."""
    end = time.monotonic() + _KILL_S
    while time.monotonic() < end:
        everyone = descendants(os.getpid())
        alive = reaper in everyone
        targets = ([reaper, *descendants(reaper)] if alive else []) + _pipe_holders(inode, everyone)
        for pid in list(targets):
            targets += descendants(pid)
        if not targets:
            return
        _signal_all(targets, signal.SIGKILL)
        _reap()
        time.sleep(0.005)


def _supervise(sock_fd: int) -> None:
    """The supervisor's loop (see the module docstring); never returns."""
    sock = socket.socket(fileno=sock_fd)
    reaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)  # inherited by the reapers (forks); reset by the shell's exec
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the host's to handle
    sock.send(b"ready" if reaper else b"ready noreaper")
    commands: dict[int, tuple[int, int]] = {}  # id -> (reaper pid, output pipe inode)
    while not stop:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        with contextlib.suppress(OSError):
            os.read(wake_r, 4096)
        _reap()
        if sock.fileno() not in ready:
            continue
        try:
            msg, ancdata, flags, _ = sock.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(_FDS_PER_SPAWN * 4))
        except OSError:
            break
        if not msg:
            break  # the host is gone
        fds = [fd for level, kind, data in ancdata if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
               for fd in memoryview(data).cast("i")[: len(data) // 4]]
        for fd in fds:
            os.set_inheritable(fd, False)  # the shell's exec closes them (its output is dup'ed to 1 and 2)
        try:
            req = json.loads(msg) if not flags & socket.MSG_TRUNC else {}
        except ValueError:
            req = {}
        if "spawn" in req and len(fds) == _FDS_PER_SPAWN:
            try:
                pid = os.fork()
            except OSError as e:
                _report(fds[1], f"error cannot fork: {e}")
                pid = -1
            if pid == 0:
                sock.close()
                os.close(wake_r)
                os.close(wake_w)
                _run_command(req, *fds)
            if pid > 0:
                commands[int(req["spawn"])] = (pid, os.fstat(fds[0]).st_ino)
        elif "kill" in req and int(req["kill"]) in commands:
            _kill_command(*commands[int(req["kill"])])
        for fd in fds:
            os.close(fd)
    _end_all(_SHUTDOWN_GRACE_S)
    os._exit(0)



class _Stop(Exception):
    """SIGTERM arrived: stop waiting (a handler that only set a flag would not end a blocking
    ``waitpid``: Python retries it after the handler, PEP 475)."""


def _stdio(argv: list[str]) -> None:
    """``--stdio CMD ARGS``: see the module docstring."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)

    def on_term(signum: int, frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is CMD's to handle; then the rest ends
    server = os.fork()
    if server == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (an ignored signal stays ignored across exec)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # this reaper killed (the OOM killer): the server ends too
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            _report(2, f"kimik3: cannot run {argv[0]!r}: {e}")
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)  # the pipes are the server's: its end of file is its own
    os.dup2(null, 0)
    os.dup2(null, 1)
    code = 0
    try:
        while True:  # orphans re-parented here are reaped on the way
            try:
                pid, status = os.waitpid(-1, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                break
            if pid == server:
                code = os.waitstatus_to_exitcode(status)
                break
    except _Stop:
        code = -signal.SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not cut short
    left = _end_all(_SHUTDOWN_GRACE_S)
    if left:
        _report(2, "kimik3: survivors " + " ".join(map(str, left)))
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stdio"]:
        _stdio(sys.argv[2:])
    if sys.argv[1:2] == ["supervise"]:
        _supervise(int(sys.argv[2]))
