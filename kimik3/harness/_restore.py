"""Restoring a planned state into the workspace for :func:`~kimik3.harness.undo`: every path
walked from the root's directory descriptor with the coding tools' walk, no symlink followed;
every target checked before the first write; removals, then writes through a temporary file
renamed into place; a failure midway puts back what had changed."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import CheckpointError, ToolError
from ..tools.coding.api import Workspace

__all__ = ["ABSENT", "Plan", "State", "Tree", "apply", "check_targets", "depth", "remove_empty_parents"]

_MAX_SCAN = 10_000  # entries looked at inside a directory that stands where a file must go
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass
class State:
    """What is (or must be) at a path: ``absent``, a ``file`` (bytes, mode), a ``link``
    (target), a ``dir`` or ``other`` (a FIFO, socket, device)."""

    kind: str
    data: bytes = b""
    mode: int | None = None  # exact permission bits (None: git's 0666/0777 less the umask)
    times: tuple[int, int] | None = None  # (atime, mtime) in ns, for copies
    link: str = ""
    create: int = 0o666  # the mode a file is created with when ``mode`` is None (the umask applies)


ABSENT = State("absent")


class Tree:
    """Confined reads and writes for undo (every walk from the root's descriptor, no symlink)."""

    def __init__(self, root: Path) -> None:
        self.ws = Workspace(root)

    def _at(self, rel: str, write: bool = False) -> Any:
        """``rel`` located; a ``write`` walk refuses git control data (``_kept``: undo never writes it)."""
        return self.ws.locate(rel, follow_symlinks=False, literal=True, write=write)

    def lstat(self, rel: str) -> os.stat_result | None:
        """The ``lstat`` of ``rel`` (None: missing); call only when its parents are directories."""
        with self._at(rel) as loc:
            try:
                return os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None

    def state(self, rel: str) -> tuple[State, str | None]:
        """(what is at ``rel``, the first parent that is not a directory, or None)."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            st = self.lstat(parent)
            if st is None:
                return ABSENT, None
            if not stat.S_ISDIR(st.st_mode):
                return ABSENT, parent
        st = self.lstat(rel)
        if st is None:
            return ABSENT, None
        if stat.S_ISDIR(st.st_mode):
            return State("dir"), None
        if stat.S_ISLNK(st.st_mode):
            with self._at(rel) as loc:
                return State("link", link=os.readlink(loc.name, dir_fd=loc.dir_fd)), None
        if not stat.S_ISREG(st.st_mode):
            return State("other"), None
        with self._at(rel) as loc:
            fd = os.open(loc.name, os.O_RDONLY | _FLAGS, dir_fd=loc.dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the lstat
            os.close(fd)
            return State("other"), None
        with os.fdopen(fd, "rb") as f:
            return State("file", f.read(), stat.S_IMODE(st.st_mode), (st.st_atime_ns, st.st_mtime_ns)), None

    def files_under(self, rel: str) -> list[str] | None:
        """Every non-directory entry below the directory ``rel`` (None: more than a bound)."""
        found: list[str] = []
        todo = [rel]
        while todo:
            here = todo.pop()
            with self._at(here) as loc:
                fd = os.open(loc.name, os.O_RDONLY | os.O_DIRECTORY | _FLAGS, dir_fd=loc.dir_fd)
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        if len(found) + len(todo) > _MAX_SCAN:
                            return None
                        child = f"{here}/{entry.name}"
                        (todo if entry.is_dir(follow_symlinks=False) else found).append(child)
            finally:
                os.close(fd)
        return found

    def subdirs(self, rel: str) -> list[str]:
        """``rel`` and the directories below it, deepest first."""
        out, todo = [], [rel]
        while todo:
            here = todo.pop()
            out.append(here)
            with self._at(here) as loc:
                fd = os.open(loc.name, os.O_RDONLY | os.O_DIRECTORY | _FLAGS, dir_fd=loc.dir_fd)
            try:
                with os.scandir(fd) as it:
                    todo += [f"{here}/{e.name}" for e in it if e.is_dir(follow_symlinks=False)]
            finally:
                os.close(fd)
        return sorted(out, key=lambda p: -p.count("/"))

    def put(self, rel: str, state: State) -> None:
        """Make ``rel`` be ``state`` (a file or symlink through a temporary file renamed into
        place; ``absent``: unlinked)."""
        with self._at(rel, write=True) as loc:
            if state.kind == "absent":
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(loc.name, dir_fd=loc.dir_fd)
                return
            tmp = f".kimik3-undo-{secrets.token_hex(6)}"
            try:
                if state.kind == "link":
                    os.symlink(state.link, tmp, dir_fd=loc.dir_fd)
                else:
                    create = state.mode if state.mode is not None else state.create
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, create, dir_fd=loc.dir_fd)
                    try:
                        view = memoryview(state.data)
                        while view:
                            view = view[os.write(fd, view):]
                        if state.mode is not None:
                            os.fchmod(fd, state.mode)
                        if state.times is not None:
                            os.utime(fd, ns=state.times)
                    finally:
                        os.close(fd)
                os.rename(tmp, loc.name, src_dir_fd=loc.dir_fd, dst_dir_fd=loc.dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=loc.dir_fd)
                raise

    def mkdir(self, rel: str) -> None:
        with self._at(rel, write=True) as loc:
            os.mkdir(loc.name, 0o777, dir_fd=loc.dir_fd)

    def rmdir(self, rel: str) -> None:
        with self._at(rel, write=True) as loc:
            os.rmdir(loc.name, dir_fd=loc.dir_fd)


@dataclass
class Plan:
    """What undo will do: each covered path's target state, and what planning found."""

    targets: dict[str, State]  # what each covered path must be
    drifted: list[str]  # changed after the agent's last turn
    done: set[str]  # already as they must be
    uncovered: dict[str, str]  # gitlinks found among the paths
    known_dirs: set[str] | None = None  # directories of the state undone to (None: unknown)


def depth(p: str) -> int:
    return p.count("/")


def check_targets(tree: Tree, plan: Plan, todo: list[str]) -> dict[str, State]:
    """The current state of each path to change, after checking that every change can be made
    without following a symlink or removing anything the agent did not make."""
    current: dict[str, State] = {}
    blocked: list[str] = []
    for p in todo:
        current[p], parent = tree.state(p)
        if parent is not None:
            removed = parent in plan.targets and plan.targets[parent].kind == "absent"
            if not removed:
                kind = "a symbolic link" if tree.state(parent)[0].kind == "link" else "not a directory"
                blocked.append(f"{p} ({parent} is {kind}; undo writes through no symlink)")
    for p in todo:
        if plan.targets[p].kind != "absent" and current[p].kind == "dir":
            inside = tree.files_under(p)
            if inside is None or any(q not in plan.targets or plan.targets[q].kind != "absent" for q in inside):
                kept = [q for q in inside or () if q not in plan.targets or plan.targets[q].kind != "absent"]
                shown = ", ".join(kept[:5]) + (", ..." if len(kept) > 5 else "")
                blocked.append(f"{p} (a directory stands where the file was, holding files the agent's turns did "
                               f"not make: {shown or 'too many to list'}; move it away, then undo again)")
    if blocked:
        raise CheckpointError("cannot restore: " + "; ".join(blocked) + "; nothing was changed")
    return current


def apply(tree: Tree, plan: Plan, todo: list[str], current: dict[str, State]) -> None:
    """Make every path of ``todo`` its target: removals (deepest first), directories standing
    where a file goes (empty by then), writes (parents first). A failure puts back what changed."""
    journal: list[tuple[str, str, State]] = []  # (action to undo it, path, prior state)
    removals = sorted((p for p in todo if plan.targets[p].kind == "absent"
                       and current[p].kind not in ("absent", "dir")), key=lambda p: (-depth(p), p))
    writes = sorted((p for p in todo if plan.targets[p].kind != "absent"), key=lambda p: (depth(p), p))
    step = ""
    try:
        for p in removals:
            step = f"remove {p}"
            tree.put(p, ABSENT)
            journal.append(("put", p, current[p]))
        for p in writes:
            if current[p].kind == "dir":
                for d in tree.subdirs(p):
                    step = f"remove the empty directory {d}"
                    tree.rmdir(d)
                    journal.append(("mkdir", d, ABSENT))
            parts = p.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                st = tree.lstat(parent)
                if st is None:
                    step = f"make the directory {parent}"
                    tree.mkdir(parent)
                    journal.append(("rmdir", parent, ABSENT))
            step = f"write {p}"
            tree.put(p, plan.targets[p])
            journal.append(("put", p, current[p] if current[p].kind != "dir" else ABSENT))
    except (OSError, ToolError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        failed = []
        for action, p, prior in reversed(journal):
            try:
                if action == "put":
                    tree.put(p, prior if prior.kind in ("file", "link", "absent") else ABSENT)
                elif action == "mkdir":
                    tree.mkdir(p)
                else:
                    tree.rmdir(p)
            except (OSError, ToolError) as again:
                failed.append(f"{p} ({getattr(again, 'strerror', None) or again})")
        back = (f"putting back failed for {', '.join(failed)}" if failed
                else "everything it had changed was put back; nothing was undone")
        raise CheckpointError(f"undo could not {step}: {why}; {back}") from e


def remove_empty_parents(tree: Tree, removed: list[str], keep: set[str], known: set[str] | None) -> None:
    """Remove the directories the undone turns made that are empty now (never one the state
    undone to had, when known)."""
    seen: set[str] = set()
    for p in sorted(removed, key=lambda p: -depth(p)):
        parts = p.split("/")
        for i in range(len(parts) - 1, 0, -1):
            d = "/".join(parts[:i])
            if d in seen or d in keep or (known is not None and d in known):
                break
            seen.add(d)
            try:
                tree.rmdir(d)
            except (OSError, ToolError):
                break
