"""Confinement of the file tools to the workspace, and opening files without blocking.

Every path is walked component by component from a descriptor of the workspace root: each
directory is opened with ``O_NOFOLLOW`` relative to its parent's descriptor (``openat``), and a
symlink met on the way is read (``readlinkat``) and its target walked the same way, refused once
it leaves the root. Nothing is ever opened by a path the kernel resolves on its own, so swapping
a directory for a symlink between a check and an open cannot lead outside (the race is lost at
worst, never won): the final open is ``O_NOFOLLOW`` from the parent's descriptor.

Only regular files are opened. A FIFO, socket or device is refused after ``lstat`` and, for the
race, the open itself is ``O_NONBLOCK`` (opening a FIFO never waits for a peer) and checked with
``fstat`` before any read or write.

Hard links cannot be confined: a file linked from outside the workspace is the same file. The file
tools read such files; they refuse to *write* a file with more than one link unless told to
(``coding_tools(..., write_hard_links=True)``).

Linux / POSIX only (``dir_fd`` support in :mod:`os`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..._exceptions import ToolError
from .._failures import kept_write
from ._kept import SessionFiles, check_git_write, git_dir_at

_MAX_LINKS = 40  # symlinks followed while walking one path (Linux's own limit)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\\"): "\\\\"
}
_ESCAPE = re.compile(r"\\(\\|n|r|t|x[0-9a-fA-F]{2})")
_UNESCAPE = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def show_path(rel: str) -> str:
    """A workspace-relative path for tool output: control characters (a newline in a file name)
    become visible escapes (``\\n``, ``\\x1b``) and a backslash is doubled, so one path is always
    one line and two names never show alike. Undecodable bytes (surrogates from
    :func:`os.fsdecode`) are escaped later as ``\\xNN`` by :class:`~kimik3.tools.ToolResult`.
    :func:`read_path` reads this form back."""
    return rel.translate(_CONTROL)


def read_path(path: str) -> str:
    """The file name a tool argument means: the escaped form :func:`show_path` prints read back
    (``\\\\`` a backslash, ``\\n`` ``\\r`` ``\\t`` control characters, ``\\xNN`` the byte NN; 0x80 and
    above as the undecodable byte :func:`os.fsdecode` gives). A backslash before anything else
    stays as it is."""
    if "\\" not in path:
        return path

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code[0] == "x":
            byte = int(code[1:], 16)
            return chr(byte) if byte < 0x80 else chr(0xDC00 + byte)
        return _UNESCAPE[code]

    return _ESCAPE.sub(one, path)


def kind_of(mode: int) -> str | None:
    """``"a FIFO (named pipe)"`` etc. for a file that is neither regular nor a directory."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None


def check_regular(st: os.stat_result, path: str) -> None:
    """ToolError unless ``st`` is a regular file (directories and special files refused)."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        kind = kind_of(st.st_mode) or "not a regular file"
        raise ToolError(
            f"{path} is {kind}, not a regular file; the file tools only open regular files (use bash "
            "for others)"
        )


@dataclass
class Located:
    """Where a path leads: ``name`` (None for a directory path such as ``.``) inside the open
    directory ``dir_fd``. Close it (``with``) to release the descriptors."""

    dir_fd: int
    name: str | None
    rel: str
    _fds: list[int] = field(default_factory=list)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _under(path: str, folder: str) -> bool:
    """Whether the absolute ``path`` names ``folder`` or something below it (lexically)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Workspace:
    """The workspace root and the confined walk of paths inside it.

    Args:
        root: the root, absolute and free of symlinks.
        what: how errors name it ("the workspace"; "the read-only folder" for :meth:`reading`'s).
        sessions: the run's session files, which every path :meth:`locate` leads to is checked
            against (refused with a ToolError: the file tools never read or write them), and the
            folders kimik3 acts on later (:meth:`~._kept.SessionFiles.keep`), which a write's
            walk refuses. A write's walk refuses git control data in any case (``_kept``).
    """

    def __init__(self, root: Path, what: str = "the workspace", sessions: SessionFiles | None = None) -> None:
        self.root = root  # absolute and free of symlinks
        self.what = what
        self.sessions = sessions
        self._in_git: bool | None = None  # the root lies in git control data (asked at the first write)

    def _check_root(self, path: str) -> None:
        """A write's check of the root itself: it is, or lies in, git control data (``-w
        repo/.git/hooks``, a folder of a bare repository): every write there is refused."""
        if self._in_git is None:
            here, inside = str(self.root), False
            while not inside:
                inside = os.path.basename(here).casefold() == ".git"
                if not inside:
                    try:
                        fd = os.open(here, DIR_FLAGS)
                    except OSError:
                        break
                    try:
                        inside = git_dir_at(fd)
                    finally:
                        os.close(fd)
                if here == os.path.dirname(here):
                    break
                here = os.path.dirname(here)
            self._in_git = inside
        if self._in_git:
            raise ToolError(kept_write(path, f"in {self.what}, which lies in git control data").message)

    def outside(self, path: str) -> ToolError:
        return ToolError(f"path {path!r} is outside {self.what} {self.root}; use a path inside it")

    def reading(self, path: str, folders: Iterable[str | os.PathLike[str]]) -> Workspace:
        """Where a *read* of ``path`` walks: this workspace, or, for an absolute path outside its
        root that lies in one of ``folders`` (folders the file tools may read but never write, such
        as skills' folders), a workspace rooted at that folder (the deepest one holding it; each
        resolved first). The walk is then confined to that folder: ``..`` or a symlink that leaves
        it is refused as one leaving the workspace is. Writes never call this."""
        p = read_path(path)
        if not p.startswith("/") or _under(p, str(self.root)):
            return self
        best = None
        for folder in folders:
            real = os.path.realpath(os.fspath(folder))
            if os.path.isabs(real) and _under(p, real) and (best is None or len(real) > len(best)):
                best = real
        return self if best is None else Workspace(Path(best), "the read-only folder", self.sessions)

    def _relative_parts(self, target: str, path: str) -> list[str]:
        """The components of ``target`` relative to the root; ``target`` may be absolute."""
        if not target.startswith("/"):
            return target.split("/")
        root = str(self.root)
        if target != root and not target.startswith(root.rstrip("/") + "/"):
            raise self.outside(path)
        return target[len(root) :].split("/")

    def _guard(self, dir_fd: int, names: list[str], name: str, path: str, creating: bool) -> None:
        """A write's check of the component ``name`` in ``dir_fd`` (``names``: the resolved
        components before it): no git control data, no kept folder (``_kept``)."""
        check_git_write(dir_fd, name, path, creating=creating)
        if self.sessions is not None:
            self.sessions.check_write(os.path.join(str(self.root), *names, name), path)

    def locate(self, path: str, *, create_dirs: bool = False, follow_symlinks: bool = True,
               literal: bool = False, write: bool = False) -> Located:
        """Walk ``path`` from the root (symlinks followed, confined); the last component is not
        opened, and is None when the path names a directory through ``.`` or ``..``.

        Args:
            path: relative to the root (or absolute inside it), in the escaped form the tools
                print (:func:`read_path`) unless ``literal``.
            create_dirs: make missing directories on the way (``mkdir`` from the parent's
                descriptor).
            follow_symlinks: False: a symlink on the way to the last component is refused
                instead of walked, and a last component that is a symlink is the symlink itself
                (``kimik3 undo`` writes only where no symlink leads).
            literal: ``path`` is the file name itself (a checkpoint record's), not escaped.
            write: the walk is a write's (or a removal's): every component, symlink targets
                included, is checked as it is reached, against git control data (a ``.git``
                name, a folder that is, or by this write would become, a git directory) and the
                kept folders of ``sessions``; a folder is checked before it is made (issue 40).

        Raises:
            ToolError: the path leaves the workspace, has a NUL, a symlink loop (or, without
                ``follow_symlinks``, any symlink on the way), or a missing or non-directory
                component (missing directories are made when ``create_dirs``); it leads to one
                of the run's session files (``sessions``); a write reaches what no tool may write.
        """
        if not literal:
            path = read_path(path)  # the escaped form the tools print names the same file
        try:
            valid = "\x00" not in path and bool(os.fsencode(path))
        except UnicodeEncodeError:
            valid = False
        if not valid:
            raise ToolError(f"invalid path {path!a}")
        todo = deque(self._relative_parts(path, path))
        try:
            fds = [os.open(self.root, DIR_FLAGS)]
        except OSError as e:
            raise ToolError(f"cannot open the workspace {self.root}: {e.strerror or e}") from None
        names: list[str] = []
        links = 0
        try:
            if write:
                self._check_root(path)  # a workspace that is, or lies in, a git directory
                for name in todo:  # a .git named in the path: refused before any folder is made
                    if name.casefold() == ".git":
                        check_git_write(fds[0], name, path)
            while todo:
                name = todo.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not names:
                        raise self.outside(path)
                    os.close(fds.pop())
                    names.pop()
                    continue
                last = not any(part not in ("", ".") for part in todo)
                if last:
                    try:
                        st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
                    except FileNotFoundError:
                        st = None
                    except OSError as e:
                        raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
                    if st is None or not stat.S_ISLNK(st.st_mode) or not follow_symlinks:
                        if write:
                            self._guard(fds[-1], names, name, path, creating=st is None)
                        if self.sessions is not None:
                            self.sessions.check(fds[-1], name, path, st)
                        located = Located(fds[-1], name, "/".join([*names, name]), fds)
                        fds = []
                        return located
                if write and name.casefold() == ".git":  # refused before it is entered or made
                    self._guard(fds[-1], names, name, path, creating=False)
                try:
                    fd = os.open(name, DIR_FLAGS, dir_fd=fds[-1])
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # a symlink, or a file
                        st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
                        if not stat.S_ISLNK(st.st_mode):
                            raise ToolError(f"{path}: {'/'.join([*names, name])} is not a directory") from None
                    elif e.errno == errno.ENOENT and todo and todo[0] == "..":  # "missing/.." is "."
                        todo.popleft()
                        continue
                    elif e.errno == errno.ENOENT and create_dirs:
                        links += 1  # bounds the retries when something keeps removing it
                        if links > _MAX_LINKS:
                            raise ToolError(f"cannot create the directories of {path}: they keep vanishing") from None
                        if write:
                            self._guard(fds[-1], names, name, path, creating=True)
                        with contextlib.suppress(FileExistsError):
                            os.mkdir(name, 0o777, dir_fd=fds[-1])
                        todo.appendleft(name)
                        continue
                    elif e.errno == errno.ENOENT:
                        raise ToolError(f"{path}: no such file or directory") from None
                    else:
                        raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
                else:
                    fds.append(fd)
                    names.append(name)
                    if write:
                        check_git_write(fd, None, path)
                        if self.sessions is not None:
                            self.sessions.check_write(os.path.join(str(self.root), *names), path)
                    continue
                # ``name`` is a symlink: walk its target in its place.
                if not follow_symlinks:
                    raise ToolError(f"{path}: {'/'.join([*names, name])} is a symbolic link")
                links += 1
                if links > _MAX_LINKS:
                    raise ToolError(f"cannot resolve path {path!r}: too many levels of symbolic links")
                target = os.readlink(name, dir_fd=fds[-1])
                if target.startswith("/"):
                    parts = self._relative_parts(target, path)
                    for fd in fds[1:]:
                        os.close(fd)
                    del fds[1:]
                    names.clear()
                else:
                    parts = target.split("/")
                todo.extendleft(reversed(parts))
            located = Located(fds[-1], None, "/".join(names) or ".", fds)
            fds = []
            return located
        except OSError as e:  # the tree changed under the walk (a racing rename), EMFILE...
            raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
        finally:
            for fd in fds:
                os.close(fd)

    def open_file(self, path: str, *, write: bool = False, read: bool = True, create: bool = False,
                  hard_links: bool = True) -> tuple[int, str, bool]:
        """Open the regular file ``path`` confined to the workspace, never blocking.

        Returns:
            (file descriptor, path relative to the root, whether the file was created). The
            descriptor is ``O_RDWR`` when ``write`` (``O_WRONLY`` when not ``read``; nothing is
            truncated), else ``O_RDONLY``.

        Raises:
            ToolError: see :meth:`locate`; a missing file (unless ``create``), a directory, a FIFO,
                socket or device, or (``write`` without ``hard_links``) a file with several links.
        """
        if path.endswith("/"):  # "zz/" names a directory: never create or open a file "zz"
            raise ToolError(f"{path} names a directory (it ends with '/'); give a file path")
        for _ in range(_MAX_LINKS):
            with self.locate(path, create_dirs=create, write=write) as loc:
                if loc.name is None:
                    raise ToolError(f"{path} is a directory")
                try:
                    st = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
                except OSError as e:
                    if not isinstance(e, FileNotFoundError):
                        raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
                    if not create:
                        raise ToolError(f"{path}: no such file") from None
                    access = os.O_RDWR if read else os.O_WRONLY
                    flags = access | os.O_CREAT | os.O_EXCL | FILE_FLAGS
                    try:
                        return os.open(loc.name, flags, 0o666, dir_fd=loc.dir_fd), loc.rel, True
                    except FileExistsError:
                        continue  # made meanwhile: look again
                    except OSError as e:
                        raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
                if stat.S_ISLNK(st.st_mode):
                    continue  # became a symlink since the walk: walk again
                check_regular(st, path)
                try:
                    access = (os.O_RDWR if read else os.O_WRONLY) if write else os.O_RDONLY
                    fd = os.open(loc.name, access | FILE_FLAGS, dir_fd=loc.dir_fd)
                except OSError as e:
                    if e.errno == errno.ELOOP:
                        continue
                    raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
                try:
                    st = os.fstat(fd)
                    check_regular(st, path)
                    if write and not hard_links and st.st_nlink > 1:
                        raise ToolError(
                            f"{path} has {st.st_nlink} hard links (it may be a file outside the workspace "
                            "too); not written. Use bash to change it if that is intended"
                        )
                except BaseException:
                    os.close(fd)
                    raise
                return fd, loc.rel, False
        raise ToolError(f"cannot open {path}: it keeps changing")

    def open_dir(self, path: str) -> tuple[int, str]:
        """(directory descriptor, relative path) of ``path``; ToolError when not a directory."""
        with self.locate(path) as loc:
            if loc.name is None:
                return os.dup(loc.dir_fd), loc.rel
            try:
                return os.open(loc.name, DIR_FLAGS, dir_fd=loc.dir_fd), loc.rel
            except FileNotFoundError:
                raise ToolError(f"{path}: no such file or directory") from None
            except OSError as e:
                if e.errno == errno.ELOOP:  # became a symlink since the walk
                    raise ToolError(f"{path} changed while it was opened; try again") from None
                raise ToolError(f"{path} is not a directory") from None

    def inside(self, rel: str) -> bool:
        """Whether ``rel`` (a symlink, say) leads somewhere inside the workspace."""
        try:
            with self.locate(rel):
                return True
        except (ToolError, OSError):
            return False

