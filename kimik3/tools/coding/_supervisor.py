"""The processes of a sandbox as kimik3 holds them: the running supervisor (:class:`_Supervisor`:
its process, bwrap's or its own, its socket and its pids cgroup) and each command started in it
(:class:`Command`: its output, status and control pipes). See ``_sandbox`` and ``_reaper``.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol

from ..._exceptions import ToolError
from . import _reaper
from ._cgroup import PidsCgroup


class _Sandbox(Protocol):
    """What a command needs of its sandbox (:class:`~kimik3.tools.coding.Sandbox`)."""

    def kill(self, command_id: int) -> None: ...

    def ended(self, command_id: int) -> None: ...

__all__ = ["Command"]

_READY_S = 30.0  # a loaded machine may take a while to start bwrap and Python
_CLOSE_S = 6.0  # the supervisor's SIGTERM second and SIGKILL round, with room


class _Supervisor:
    """The running supervisor: its process (bwrap's, or its own), its socket, its stderr, and the
    pids cgroup it runs in (None where none can be made)."""

    def __init__(self, argv: list[str], program: bytes, root: Path, max_tasks: int | None) -> None:
        # Started from the calling thread (the event loop's): bwrap's --die-with-parent follows the
        # thread that forked it, so a worker thread that exits would end the sandbox.
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.cgroup: PidsCgroup | None = None
        try:
            self.proc = subprocess.Popen([*argv, str(theirs.fileno())], cwd=root, stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),),
                                         start_new_session=True, env={"PATH": os.environ.get("PATH", os.defpath)})
        except OSError as e:
            self.sock.close()
            raise ToolError(f"cannot start the command supervisor ({argv[0]}): {e}") from None
        finally:
            theirs.close()
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError), self.proc.stdin:  # fits the pipe's buffer; Python reads it all, runs it
            self.proc.stdin.write(program)
        self.sock.settimeout(_READY_S)
        try:
            ready = self.sock.recv(64)
        except OSError:
            ready = b""
        self.sock.settimeout(None)
        assert self.proc.stderr is not None
        if not ready.startswith(b"ready"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
            os.set_blocking(self.proc.stderr.fileno(), False)
            said = b""
            with contextlib.suppress(OSError):
                said = self.proc.stderr.read(4000) or b""
            why = said.decode("utf-8", "replace").strip() or f"exit code {self.proc.poll()}"
            self.abandon()
            raise ToolError(f"the sandbox did not start: {why}")
        self.proc.stderr.close()  # read only if it does not start; a later writer gets EPIPE
        self.contained = ready == b"ready"
        if max_tasks:  # it forks nothing before the first request: move it (and bwrap's) in now
            try:
                self.cgroup = PidsCgroup(max_tasks)
                self.cgroup.add([self.proc.pid, *_reaper.descendants(self.proc.pid)])
            except OSError:
                if self.cgroup is not None:
                    self.cgroup.remove()
                self.cgroup = None

    def alive(self) -> bool:
        return self.sock.fileno() >= 0 and self.proc.poll() is None

    def send(self, request: dict[str, Any], fds: list[int]) -> None:
        fds_part = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        self.sock.sendmsg([json.dumps(request).encode()], fds_part)

    def abandon(self) -> None:
        """Close the socket (the supervisor ends everything and exits); no waiting."""
        self.sock.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def release(self) -> None:
        """:meth:`abandon`, then, in a thread, wait for the supervisor and end its cgroup (the
        sandbox was garbage-collected without being closed)."""
        self.abandon()
        if self.cgroup is not None:
            threading.Thread(target=self._wait_and_end, daemon=True, name="kimik3-sandbox-release").start()

    def _wait_and_end(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(_CLOSE_S)
        if self.proc.poll() is None:
            self.kill_now()
        self.end_cgroup()

    def kill_now(self) -> None:
        """The supervisor did not exit in time: SIGKILL it (bwrap's: the namespace dies with it)
        and, without a PID namespace, every process below it first."""
        for pid in _reaper.descendants(self.proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        with contextlib.suppress(OSError):
            self.proc.kill()

    def end_cgroup(self) -> None:
        """Whatever is still in the cgroup (a process that escaped the supervisor's tree): SIGKILL;
        then remove it."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()


class Command:
    """One command started in the sandbox: its output pipe, its reaper's status and control pipes
    (see ``_reaper``); every descriptor non-blocking, owned here.

    Attributes:
        output: the read end of the command's stdout + stderr.
        exit_code: the shell's exit code (``-S`` for signal S) once reported.
        left: pids (inside the sandbox) still running after the shell exited, once asked (``q``).
        survivors: pids still alive after a kill.
        limit: "processes N" when the command reached the process limit and was killed.
        contained: False when the kernel refused a subreaper (daemons may escape).
        closed: the reaper has exited: nothing of the command is left.
        note: a line about the sandbox to add to the result (it was restarted), or None.
    """

    def __init__(self, sandbox: _Sandbox, cid: int, output: int, status: int, control: int, note: str | None) -> None:
        self.sandbox, self.id, self.note = sandbox, cid, note
        self.output, self.status_fd, self.control = output, status, control
        for fd in (output, status, control):
            os.set_blocking(fd, False)
        self._buffer = b""
        self.exit_code: int | None = None
        self.left: list[int] | None = None
        self.survivors: list[int] = []
        self.limit: str | None = None
        self.error: str | None = None
        self.contained = True
        self.closed = False

    def poll(self) -> None:
        """Read what the reaper reported since the last poll."""
        if self.closed:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.status_fd, 4096):
                self._buffer += chunk
            self.closed = True
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            word, _, rest = line.decode("utf-8", "replace").partition(" ")
            if word == "exit":
                self.exit_code = int(rest)
            elif word == "left":
                self.left = [int(p) for p in rest.split()]
            elif word == "survivors":
                self.survivors = [int(p) for p in rest.split()]
            elif word == "limit":
                self.limit = rest
            elif word == "error":
                self.error = rest
            elif word == "noreaper":
                self.contained = False

    def send(self, byte: bytes) -> bool:
        """Send ``q``, ``t`` or ``k`` to the reaper; False when it is gone."""
        try:
            return os.write(self.control, byte) == 1
        except OSError:
            return False

    def kill(self) -> None:
        """The fallback when the reaper does not answer: the supervisor SIGKILLs what is left."""
        self.sandbox.kill(self.id)

    def close(self) -> None:
        self.sandbox.ended(self.id)
        for fd in (self.output, self.status_fd, self.control):
            with contextlib.suppress(OSError):
                os.close(fd)
