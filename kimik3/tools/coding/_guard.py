"""The git control data of the workspace under Landlock: kept by checking and restoring, since a
Landlock rule cannot make part of a writable folder read-only (a folder's rule covers everything
beneath it; see ``_landlock``). bubblewrap binds it read-only instead (``_sandbox``).

:class:`GitGuard` copies, when the sandbox starts, every git directory (and ``.git`` file) that
``_kept.kept_read_only`` names, but for ``objects``, ``logs``, ``lfs`` and ``index`` (content only
added to, or rebuilt by git; nothing in them runs). After each foreground command, each
``read_output`` and at the run's end it compares (``lstat`` first, the bytes where that differs)
and puts back what changed: a file rewritten, added (a hook) or removed, a folder replaced by a
symlink. Everything is done from the workspace's descriptor, no symlink followed. See
``docs/sandbox.md``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Sequence

__all__ = ["GitGuard"]

_SKIP_DIRS = frozenset({"objects", "logs", "lfs"})
_SKIP_FILES = frozenset({"index"})
_MAX_BYTES = 64 << 20  # the copy is held in memory: a larger git directory is refused

Entry = tuple[str, bytes, int]  # ("d" | "f" | "l", content or link target, mode)


def _parent(root_fd: int, rel: str) -> tuple[int, str]:
    """(a descriptor of ``rel``'s folder, its last name), each folder on the way opened without
    following a symlink (the caller closes the descriptor).

    Raises:
        OSError: a folder on the way is missing or is not a folder (a symlink put there).
    """
    *folders, name = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in folders:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def _walk(root_fd: int, rel: str, out: dict[str, Entry], total: list[int], git: bool = True) -> None:
    """Record ``rel`` (relative to ``root_fd``) and, for a folder, what it holds (in a git
    directory, ``git``, but for what nothing runs from)."""
    try:
        pfd, name = _parent(root_fd, rel)
    except OSError:
        return
    try:
        st = os.lstat(name, dir_fd=pfd)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("l", os.fsencode(os.readlink(name, dir_fd=pfd)), 0)
        elif stat.S_ISREG(st.st_mode):
            with os.fdopen(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=pfd), "rb") as f:
                data = f.read(_MAX_BYTES + 1)
            total[0] += len(data)
            if total[0] > _MAX_BYTES:
                raise OSError(f"the git control data is larger than {_MAX_BYTES >> 20} MiB")
            out[rel] = ("f", data, stat.S_IMODE(st.st_mode))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("d", b"", stat.S_IMODE(st.st_mode))
            dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=pfd)
            try:
                names = sorted(os.listdir(dfd))
            finally:
                os.close(dfd)
            for child in names:
                if git and (child in _SKIP_DIRS or child in _SKIP_FILES or child.endswith(".lock")):
                    continue
                _walk(root_fd, f"{rel}/{child}", out, total, git)
    except FileNotFoundError:
        return
    finally:
        os.close(pfd)


class GitGuard:
    """A copy of the git control data ``paths`` (absolute, in ``root``) and of the folders
    ``whole`` (kept folders such as the workspace's skills: all of them), and the means to put
    them back (see the module docstring).

    Raises:
        OSError: the data cannot be read, or is larger than 64 MiB.
    """

    def __init__(self, root: str, paths: list[str], whole: Sequence[str] = ()) -> None:
        self.root = root
        self.tops = [(os.path.relpath(p, root), True) for p in paths]
        self.tops += [(os.path.relpath(p, root), False) for p in whole]
        self.copy = self._state()

    def _state(self) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for top, git in self.tops:
                _walk(fd, top, out, [0], git)
        finally:
            os.close(fd)
        return out

    def renew(self) -> None:
        """Take the copy again (the data as it is now is the one to keep): called only while
        nothing of the sandbox runs, after a check put back what the commands changed."""
        self.copy = self._state()

    def restore(self) -> list[str]:
        """Put back what changed since the copy; the paths put back (relative to the workspace,
        the topmost of each change)."""
        now = self._state()
        changed = sorted({p for p in (*self.copy, *now) if self.copy.get(p) != now.get(p)},
                         key=lambda p: (p.count("/"), p))
        if not changed:
            return []
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for rel in changed:
                with contextlib.suppress(OSError):  # a folder on the way replaced: put back before
                    _put(fd, rel, self.copy.get(rel), now.get(rel))
        finally:
            os.close(fd)
        return [p for p in changed if not any(p.startswith(q + "/") for q in changed)]


def _put(root_fd: int, rel: str, want: Entry | None, now: Entry | None) -> None:
    """Make ``rel`` what ``want`` says (None: nothing), never through a symlink."""
    pfd, name = _parent(root_fd, rel)
    try:
        if now is not None and not (want is not None and want[0] == "d" == now[0]):
            _remove(pfd, name)
        if want is None:
            return
        kind, data, mode = want
        if kind == "d":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=pfd)
            os.chmod(name, mode, dir_fd=pfd, follow_symlinks=False)
        elif kind == "l":
            os.symlink(os.fsdecode(data), name, dir_fd=pfd)
        else:
            with os.fdopen(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=pfd),
                           "wb") as f:
                f.write(data)
    finally:
        os.close(pfd)


def _remove(pfd: int, name: str) -> None:
    """Remove ``name`` in the folder ``pfd`` whatever it is (a folder with what it holds)."""
    try:
        st = os.lstat(name, dir_fd=pfd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=pfd)
    else:
        os.unlink(name, dir_fd=pfd)
