"""Background processes: long-running commands (a dev server, a watcher) the agent starts,
reads and stops across tool calls; and the hook that ends the run's sandbox.

Each command runs in the run's sandbox (:class:`~kimik3.tools.coding.Sandbox`, shared with
``bash``: a server started here answers a later ``bash`` call on 127.0.0.1) under its own reaper,
a child subreaper: every process the command starts stays its descendant, ``setsid`` and
double-fork daemons included, whatever they do to their environment, so "ended" means the reaper
found none left (``/proc`` and ``waitpid``), not that a signal was sent. Stdin is empty, the
environment is ``bash``'s (editors, pagers and prompts fail fast), and stdout + stderr go to a
pipe a thread reads as it comes (a pipe nobody reads would block the process) into a bounded
buffer: the first and the last ``4 * max_output_chars`` bytes since the last read, the middle
counted and dropped, so a flood costs neither memory nor disk. :meth:`BackgroundProcesses.close`
ends every process (SIGTERM, then SIGKILL after a grace period); as a
:class:`~kimik3.agents.RunHooks` it runs when the run ends, however it ends.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import anyio

from .._exceptions import ToolError
from ..agents import RunHooks, SessionWriter
from ..tools import truncate_middle
from ..tools.coding import Sandbox, SandboxMode
from ..tools.coding.api import Command, kept_paths, made_repositories, repositories, shell_env

__all__ = ["BackgroundProcesses", "SandboxHooks"]

_GRACE_S = 2.0
_KILL_S = 2.0 + 3.0  # the reaper's SIGKILL round, with room
_POLL_S = 0.02


class _Capture(threading.Thread):
    """Reads a process's output pipe until end of file, keeping the first and the last ``cap``
    bytes since the last :meth:`take` and counting the rest."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__(daemon=True, name="kimik3-background-output")
        self.fd, self.cap = fd, cap
        self.lock = threading.Lock()
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def run(self) -> None:
        os.set_blocking(self.fd, True)
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.total += len(chunk)
                room = self.cap - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                self.tail += chunk
                if len(self.tail) > self.cap:
                    del self.tail[: len(self.tail) - self.cap]

    def take(self) -> tuple[bytes, bytes, int]:
        """(head, tail, total bytes) since the last take; the buffer starts again empty."""
        with self.lock:
            out = bytes(self.head), bytes(self.tail), self.total
            self.head, self.tail, self.total = bytearray(), bytearray(), 0
        return out


def _now() -> float:
    """Seconds on the monotonic clock (a job's age in its status line)."""
    return time.monotonic()


@dataclass
class _Process:
    id: str
    command: str
    cmd: Command
    capture: _Capture
    stopped: bool = False
    started: float = dataclasses.field(default_factory=lambda: _now())

    def alive(self) -> bool:
        """Whether a process of the command is left: its reaper reports until none is; if a
        command killed its reaper, what still holds the output counts."""
        self.cmd.poll()
        return not self.cmd.closed or self.capture.is_alive()


class BackgroundProcesses(RunHooks):
    """The background processes of one run.

    Args:
        root: the working directory of the commands.
        shell: the shell (``bash`` when installed).
        max_output_chars: cap on the text one :meth:`read_output` returns (head and tail kept).
        max_running: how many may run at once; :meth:`start` refuses one more.
        sandbox: where they run: a :class:`~kimik3.tools.coding.Sandbox` to share with ``bash``,
            or a mode for one of their own ("auto", "bwrap", "none"), closed by :meth:`close`.

    Raises:
        SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
    """

    def __init__(self, root: str | os.PathLike[str], *, shell: str | None = None,
                 max_output_chars: int = 30_000, max_running: int = 16,
                 sandbox: SandboxMode | Sandbox = "auto") -> None:
        self.max_running = max_running
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self.max_output_chars = max_output_chars
        self._own_sandbox = not isinstance(sandbox, Sandbox)
        self.sandbox = sandbox if isinstance(sandbox, Sandbox) else Sandbox(root, sandbox)
        self.root = self.sandbox.root
        self._procs: dict[str, _Process] = {}
        self._n = 0

    def start(self, command: str) -> str:
        """Start ``command``; returns its id (``bg1``, ``bg2``...).

        Raises:
            ToolError: ``max_running`` are running already, or the sandbox cannot start.
        """
        running = self.running()
        if len(running) >= self.max_running:
            raise ToolError(f"{len(running)} background processes are running ({', '.join(running)}), the "
                            f"limit; stop one with stop(id) first")
        cmd = self.sandbox.spawn([self.shell, "-c", command], shell_env(), grace=_GRACE_S, cpu=False,
                                 background=True)
        capture = _Capture(cmd.output, 4 * self.max_output_chars + 4)  # bytes that surely hold the chars
        capture.start()
        self._n += 1
        pid = f"bg{self._n}"
        self._procs[pid] = _Process(pid, command, cmd, capture)
        return pid

    def _get(self, pid: str) -> _Process:
        proc = self._procs.get(pid)
        if proc is None:
            known = ", ".join(self._procs) or "none"
            raise ToolError(f"no background process {pid!r}; started in this run: {known}")
        return proc

    @staticmethod
    def _status(proc: _Process) -> str:
        alive = proc.alive()
        code = proc.cmd.exit_code
        if code is None and alive:  # for how long: a poll of a silent job is not the same poll again
            return f"running for {int(_now() - proc.started)} s"  # (the loop breaker, agents/_loops.py)
        if proc.stopped:
            return "stopped"
        if code is None:
            return "ended (its reaper was killed; exit code unknown)"
        return f"exited with code {code if code >= 0 else 128 - code}"

    def read_output(self, pid: str) -> str:
        """The output since the last read, then a line "[bgN: running for N s | exited with code N |
        stopped]" (the seconds since it started: polls of a silent job differ, so waiting on a
        long build is never taken for a loop)."""
        proc = self._get(pid)
        if not proc.alive():
            proc.capture.join(1.0)  # nothing writes any more: what is in the pipe is read first
        head, tail, total = proc.capture.take()
        if total <= len(head) + len(tail):
            text = truncate_middle((head + tail).decode("utf-8", "replace"), self.max_output_chars)
        else:  # a flood: only its head and tail were kept
            half = max(self.max_output_chars // 2 - 40, 0)
            first = head.decode("utf-8", "replace")[:half]
            last = tail.decode("utf-8", "replace")[-half:] if half else ""
            text = f"{first}\n... [{total - len(first.encode()) - len(last.encode())} bytes elided] ...\n{last}"
        text = text.rstrip("\n")
        status = "\n".join([*(f"[{note}]" for note in self.sandbox.restore_git_links()),
                            f"[{pid}: {self._status(proc)}]"])
        return f"{text}\n{status}" if text else f"[no new output]\n{status}"

    async def stop(self, pid: str) -> str:
        """End ``pid`` and every process it started; returns its last output and status."""
        proc = self._get(pid)
        await self._end(proc)
        return self.read_output(pid)

    @staticmethod
    async def _end(proc: _Process) -> None:
        if not proc.alive():
            return
        proc.stopped = proc.cmd.exit_code is None or proc.stopped
        if proc.cmd.send(b"t"):  # the reaper: SIGTERM to all, the grace, SIGKILL, then it exits
            end = time.monotonic() + _GRACE_S + _KILL_S
            while proc.alive() and time.monotonic() < end:
                await anyio.sleep(_POLL_S)
        if proc.alive() or proc.capture.is_alive():
            proc.cmd.kill()  # its reaper is gone or stuck: the supervisor SIGKILLs what is left
            end = time.monotonic() + _KILL_S
            while (proc.alive() or proc.capture.is_alive()) and time.monotonic() < end:
                await anyio.sleep(_POLL_S)

    def running(self) -> list[str]:
        """Ids of the commands with a process still alive (the shell, or anything it started)."""
        return [p.id for p in self._procs.values() if p.alive()]

    async def close(self) -> None:
        """End every process (and this object's own sandbox)."""
        for proc in self._procs.values():
            await self._end(proc)
        for proc in self._procs.values():
            proc.capture.join(1.0)
            if not proc.capture.is_alive():  # else a survivor holds the pipe: the fd stays open
                proc.cmd.close()
        if self._own_sandbox:
            await self.sandbox.aclose()

    async def run_end(self) -> None:
        await self.close()


class SandboxHooks(RunHooks):
    """Run hooks of a :class:`~kimik3.tools.coding.Sandbox`: a new session's header records it
    (``"sandbox": {...}``, see :meth:`~kimik3.tools.coding.Sandbox.info`; a continued one gets a
    ``sandbox`` record at the run's start), and the run's end ends it, with every process in it.
    A repository a command made during the run whose git directory names programs (a
    ``core.fsmonitor``, a hook: no mount could keep it, see ``_kept``), and any repository a
    command replaced (a submodule's folder moved away and a repository made in its place), is
    named at the run's end in a :class:`RuntimeWarning` (issue 40); so is a path kept from every
    tool (a ``core.hooksPath`` folder, a skills folder) that a command made: missing at the start,
    no mount could keep it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.repositories: dict[str, tuple[int, int]] | None = None  # the repositories at the start (ids)
        self.missing: dict[str, str] = {}  # kept paths in the workspace missing at the start -> what they are

    def session_header(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox.info()}

    async def run_start(self, session: SessionWriter | None) -> None:
        # the session and its sub-agents' sessions (read-only in the sandbox, refused by the file
        # tools): a forged record there, an approval of a deferred call, would be acted on by a resume
        self.sandbox.sessions.set(session.path if session is not None else None)
        if session is not None and not session.new:
            session.record("sandbox", self.sandbox.info())
        root = str(self.sandbox.root)  # a repository a command makes is the command's: said at the end
        self.repositories = repositories(await anyio.to_thread.run_sync(kept_paths, root))
        inside = os.path.realpath(root).rstrip("/") + "/"
        self.missing = {p: what for p, what in self.sandbox.sessions.folders.items()
                        if p.startswith(inside) and not os.path.lexists(p)}

    async def run_end(self) -> None:
        await self.sandbox.aclose()
        self.sandbox.restore_git_links()  # its warning says so: nothing runs in the sandbox now
        if self.repositories is not None:
            before, self.repositories = self.repositories, None
            for line in await anyio.to_thread.run_sync(made_repositories, str(self.sandbox.root), before):
                warnings.warn(f"kimik3: {line}", RuntimeWarning, stacklevel=2)
        missing, self.missing = self.missing, {}
        for path, what in sorted(missing.items()):  # no mount could keep what did not exist
            if os.path.lexists(path):
                warnings.warn(f"kimik3: a command made {os.path.relpath(path, self.sandbox.root)} during the run, "
                              f"{what}; it did not exist when the sandbox started, so nothing kept it: look at it "
                              "before git or a later run acts on it", RuntimeWarning, stacklevel=2)
