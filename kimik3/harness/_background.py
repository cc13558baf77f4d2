"""Background processes: long-running commands (a dev server, a watcher) the agent starts,
reads and stops across tool calls.

Each command runs in its own session and process group (``start_new_session``), with stdin empty,
``bash``'s environment (editors, pagers and prompts fail fast) and stdout + stderr going to a log
file the manager owns (a pipe nobody reads would block the
process). :meth:`BackgroundProcesses.close` ends every group still alive (SIGTERM, then SIGKILL
after a grace period) and removes the logs; as a :class:`~kimik3.agents.RunHooks` it runs when the
run ends, however it ends. Membership of a group is read from ``/proc`` (Linux), so "ended" means
no live process of the group is left, not that a signal was sent; a process that left the group
(``setsid``, a daemonising double fork) is still found by an environment entry every command's
processes inherit (``KIMIK3_BACKGROUND=...``) and ended too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from .._exceptions import ToolError
from ..agents import RunHooks
from ..tools import truncate_middle
from ..tools.coding._api import shell_env

__all__ = ["BackgroundProcesses", "group_members"]

_GRACE_S = 2.0
_POLL_S = 0.02


def group_members(pgid: int, tag: bytes | None = None) -> list[int]:
    """Pids of the live (not zombie) processes whose process group is ``pgid`` or, with ``tag``,
    whose environment holds the entry ``tag`` (inherited by children that left the group with
    ``setsid``), from ``/proc``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) < 3 or fields[0] in (b"Z", b"X"):
                continue
            if int(fields[2]) != pgid:
                if tag is None:
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if tag not in f.read().split(b"\0"):
                        continue
        except OSError:
            continue
        members.append(int(entry))
    return members


@dataclass
class _Process:
    id: str
    command: str
    popen: subprocess.Popen[bytes]
    log: Path
    tag: bytes
    read_to: int = 0
    stopped: bool = False

    def members(self) -> list[int]:
        return group_members(self.popen.pid, self.tag)


class BackgroundProcesses(RunHooks):
    """The background processes of one run.

    Args:
        root: the working directory of the commands.
        shell: the shell (``bash`` when installed).
        max_output_chars: cap on the text one :meth:`read_output` returns (head and tail kept).
        max_running: how many may run at once; :meth:`start` refuses one more.
    """

    def __init__(self, root: str | os.PathLike[str], *, shell: str | None = None,
                 max_output_chars: int = 30_000, max_running: int = 16) -> None:
        self.max_running = max_running
        self.root = Path(root)
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self.max_output_chars = max_output_chars
        self._procs: dict[str, _Process] = {}
        self._dir: Path | None = None
        self._n = 0

    def start(self, command: str) -> str:
        """Start ``command``; returns its id (``bg1``, ``bg2``...).

        Raises:
            ToolError: ``max_running`` are running already.
        """
        running = self.running()
        if len(running) >= self.max_running:
            raise ToolError(f"{len(running)} background processes are running ({', '.join(running)}), the "
                            f"limit; stop one with stop(id) first")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="kimik3-bg-"))
        self._n += 1
        pid = f"bg{self._n}"
        log = self._dir / f"{pid}.log"
        tag = f"KIMIK3_BACKGROUND={os.getpid()}-{id(self):x}-{pid}"
        with open(log, "wb") as out:
            popen = subprocess.Popen([self.shell, "-c", command], cwd=self.root, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**shell_env(), **dict([tag.split("=", 1)])})
        self._procs[pid] = _Process(pid, command, popen, log, tag.encode())
        return pid

    def _get(self, pid: str) -> _Process:
        proc = self._procs.get(pid)
        if proc is None:
            known = ", ".join(self._procs) or "none"
            raise ToolError(f"no background process {pid!r}; started in this run: {known}")
        return proc

    def _status(self, proc: _Process) -> str:
        rc = proc.popen.poll()
        if rc is None:
            return "running"
        if proc.stopped:
            return "stopped"
        return f"exited with code {rc if rc >= 0 else 128 - rc}"

    def read_output(self, pid: str) -> str:
        """The output since the last read, then a line "[bgN: running | exited with code N |
        stopped]"."""
        proc = self._get(pid)
        cap = 4 * self.max_output_chars + 4  # bytes that surely hold max_output_chars characters
        with open(proc.log, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(proc.read_to)
            if size - proc.read_to <= 2 * cap:
                text = truncate_middle(f.read(size - proc.read_to).decode("utf-8", "replace"), self.max_output_chars)
            else:  # a flood: read only its head and tail, memory stays bounded
                half = max(self.max_output_chars // 2 - 40, 0)
                head = f.read(cap).decode("utf-8", "replace")[:half]
                f.seek(size - cap)
                tail = f.read(cap).decode("utf-8", "replace")[-half:] if half else ""
                elided = size - proc.read_to - len(head.encode()) - len(tail.encode())
                text = f"{head}\n... [{elided} bytes elided] ...\n{tail}"
        proc.read_to = size
        text = text.rstrip("\n")
        status = f"[{pid}: {self._status(proc)}]"
        return f"{text}\n{status}" if text else f"[no new output]\n{status}"

    async def stop(self, pid: str) -> str:
        """End the process group of ``pid``; returns its last output and status."""
        proc = self._get(pid)
        await self._end(proc)
        return self.read_output(pid)

    @staticmethod
    def _signal(proc: _Process, sig: signal.Signals) -> None:
        """``sig`` to the group and to every tagged process that left it (``setsid``)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, sig)
        for member in proc.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, sig)

    async def _end(self, proc: _Process) -> None:
        if proc.members():
            proc.stopped = proc.popen.poll() is None or proc.stopped
            self._signal(proc, signal.SIGTERM)
            end = time.monotonic() + _GRACE_S
            while time.monotonic() < end and (proc.popen.poll() is None or proc.members()):
                await anyio.sleep(_POLL_S)
            if proc.members():
                self._signal(proc, signal.SIGKILL)
        for _ in range(250):  # SIGKILL acts at once; reap the shell and see the group gone (<= 5 s)
            if proc.popen.poll() is not None and not proc.members():
                break
            await anyio.sleep(_POLL_S)

    def running(self) -> list[str]:
        """Ids of the processes whose group (or a tagged process that left it) is still alive."""
        return [p.id for p in self._procs.values() if p.members()]

    async def close(self) -> None:
        """End every process group and remove the logs."""
        for proc in self._procs.values():
            await self._end(proc)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def run_end(self) -> None:
        await self.close()
