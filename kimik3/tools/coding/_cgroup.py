"""A pids cgroup per sandbox, where this process may make one (root; a delegated cgroup v2 tree):
a hard cap on the tasks of the run's commands that holds for root too (``RLIMIT_NPROC`` does not
bind root), and a membership no process can leave, so a command that kills its supervisor is still
found and ended. Both cgroup v1 (a ``pids`` hierarchy) and v2 (a parent whose
``cgroup.subtree_control`` has ``pids``) are used; elsewhere the sandbox goes without (the reapers'
watchdog and, for bwrap run by another user than root, ``RLIMIT_NPROC`` remain).

Only the pids controller is touched: the processes' other cgroups (memory, cpu) stay as they are.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from pathlib import Path

__all__ = ["PidsCgroup"]

_counter = itertools.count(1)


def _mount_points() -> list[tuple[str, str, list[str]]]:
    """(mount point, file system type, super options) of each cgroup mount, from mountinfo."""
    out: list[tuple[str, str, list[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) > 4 and len(tail) > 2 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], tail[0], tail[2].split(",")))
    return out


@functools.lru_cache(maxsize=1)
def _parent() -> Path | None:
    """A cgroup directory where a child with ``pids.max`` can be made and this process may move
    its children into, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mount_points()
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # v1: a hierarchy of its own
            for mount, kind, options in mounts:
                if kind == "cgroup" and "pids" in options:
                    d = Path(mount + path.rstrip("/"))
                    if (d / "pids.max").exists() or d == Path(mount):
                        return d if os.access(d, os.W_OK) else None
        if hid == "0" and not controllers:  # v2: the parent of this process's own cgroup
            for mount, kind, _ in mounts:
                if kind == "cgroup2":
                    d = Path(mount + path.rstrip("/")).parent
                    with contextlib.suppress(OSError):
                        if "pids" in (d / "cgroup.subtree_control").read_text().split() and os.access(d, os.W_OK):
                            return d
    return None


def _sweep(parent: Path) -> None:
    """Remove the cgroups a kimik3 process that has died left behind, ending what they hold."""
    for d in parent.glob("kimik3-*-*"):
        with contextlib.suppress(ValueError, OSError):
            owner = int(d.name.split("-")[1])
            if owner == os.getpid() or Path(f"/proc/{owner}").exists():
                continue
            left = object.__new__(PidsCgroup)
            left.path = d
            left.kill_all()
            left.remove()


class PidsCgroup:
    """One sandbox's pids cgroup (see the module docstring).

    Args:
        max_tasks: ``pids.max``: processes and threads together.

    Raises:
        OSError: no cgroup can be made here (callers go without).
    """

    def __init__(self, max_tasks: int) -> None:
        parent = _parent()
        if parent is None:
            raise OSError("no writable pids cgroup")
        _sweep(parent)
        self.path = parent / f"kimik3-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            (self.path / "pids.max").write_text(str(max_tasks))
        except OSError:
            self.remove()
            raise

    def add(self, pids: list[int]) -> None:
        """Move ``pids`` in (before they fork: their children are born inside)."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                (self.path / "cgroup.procs").write_text(str(pid))

    def members(self) -> list[int]:
        """The processes in it now."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def refused(self) -> int:
        """How many forks ``pids.max`` refused so far."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (self.path / "pids.events").read_text().splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
        return 0

    def kill_all(self, seconds: float = 2.0) -> list[int]:
        """SIGKILL every member until none is left (at most ``seconds``); returns the survivors."""
        end = time.monotonic() + seconds
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")  # v2 (5.14+): all at once, forks included
        while (members := self.members()) and time.monotonic() < end:
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        return self.members()

    def remove(self) -> None:
        """Remove the (empty) cgroup; a cgroup that still has members is left."""
        for _ in range(50):  # the kernel may need a moment after the last exit
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
