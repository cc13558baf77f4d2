"""Writes of the file tools that happen only while their call is live.

A sync tool's thread that overran its time limit is abandoned and runs on (see
:meth:`kimik3.tools.Tool.run`); its writes must not land after the call was reported over. So a
file's new bytes go to a temporary file in the target's own directory first (:func:`stage`),
and only then, past :func:`~kimik3.tools._limits.commit_point` (which raises once the call was
abandoned), is it renamed over the target (:meth:`Staged.commit`). A call abandoned before its
commit point changes nothing (its temporary file is removed); a reader never sees a file half
written. Paths are walked like every file tool's (:class:`~._paths.Workspace`: confined, from
the root's descriptor).

The temporary file takes the target's permission bits and owner. Where renaming would change
more than the bytes, the file is written in place instead, after the commit point: a file with
several hard links (written only when allowed), one whose owner cannot be kept, a directory
where no new file can be made, a target that cannot be renamed over (a bind mount). A new
file whose directories are missing is made, directories and all, after the commit point.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass, field

from ..._exceptions import ToolError
from .._limits import commit_point
from ._paths import FILE_FLAGS, Workspace, check_regular

__all__ = ["Staged", "replace", "stage"]

_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass
class Staged:
    """A file's new content, ready to be put in place by :meth:`commit` (or dropped by
    :meth:`discard`). ``rel``: the workspace-relative path."""

    ws: Workspace
    path: str  # as the tool was given it (for messages and, when directories are missing, the walk)
    rel: str
    data: bytes
    dir_fd: int = -1
    name: str = ""
    tmp: str | None = None  # the temporary file in dir_fd, renamed over name by commit()
    in_place: bool = False  # written into the existing file itself (see the module docstring)
    _done: bool = field(default=False, repr=False)

    def commit(self) -> str:
        """Put the content in place (call after :func:`~kimik3.tools._limits.commit_point`);
        the workspace-relative path.

        Raises:
            ToolError: the write failed (disk full, I/O error), naming the path.
        """
        try:
            if self.dir_fd < 0:  # a new file in directories that do not exist yet
                with self.ws.locate(self.path, create_dirs=True, write=True) as loc:
                    if loc.name is None:
                        raise ToolError(f"{self.path} is a directory")
                    fd = os.open(loc.name, _TMP_FLAGS & ~os.O_EXCL | os.O_TRUNC, 0o666, dir_fd=loc.dir_fd)
                    try:
                        _write_all(fd, self.data)
                    finally:
                        os.close(fd)
                    self.rel = loc.rel
            elif self.in_place:
                fd = os.open(self.name, os.O_WRONLY | FILE_FLAGS, dir_fd=self.dir_fd)
                try:
                    check_regular(os.fstat(fd), self.path)
                    os.ftruncate(fd, 0)
                    _write_all(fd, self.data)
                finally:
                    os.close(fd)
            else:
                assert self.tmp is not None
                os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                self.tmp = None
        except OSError as e:
            if e.errno == errno.EBUSY and self.tmp is not None:  # a bind-mounted file: write it in place
                self.discard_tmp()
                self.in_place = True
                return self.commit()
            raise ToolError(f"cannot write {self.path}: {e.strerror or e}") from None
        return self.rel

    def discard_tmp(self) -> None:
        if self.tmp is not None and self.dir_fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dir_fd)
        self.tmp = None

    def discard(self) -> None:
        """Remove the temporary file (if still there) and release the directory (idempotent)."""
        self.discard_tmp()
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def stage(ws: Workspace, path: str, data: bytes, *, hard_links: bool, same: tuple[int, int] | None = None) -> Staged:
    """Prepare ``data`` as the whole new content of the regular file ``path`` (made when missing)
    without changing the target (see the module docstring); use the result as a context manager
    and :meth:`Staged.commit` it after :func:`~kimik3.tools._limits.commit_point`.

    Args:
        ws: the workspace.
        path: the file, as a tool argument (escaped form, symlinks inside the workspace followed).
        data: the new bytes.
        hard_links: a file with several hard links may be written (in place).
        same: ``(st_dev, st_ino)`` of the file the new content was computed from: refused when
            another file stands there now.

    Raises:
        ToolError: see :meth:`~._paths.Workspace.locate`; a directory, a special file, a file
            with several links (without ``hard_links``), a file replaced since it was read, or
            the temporary file cannot be written (disk full).
    """
    if path.endswith("/"):  # "zz/" names a directory: never create or open a file "zz"
        raise ToolError(f"{path} names a directory (it ends with '/'); give a file path")
    try:
        loc = ws.locate(path, write=True)
    except ToolError as e:
        if same is None and str(e).endswith("no such file or directory"):  # directories to make: at commit
            return Staged(ws, path, "", data)
        raise
    with loc:
        if loc.name is None:
            raise ToolError(f"{path} is a directory")
        try:
            st: os.stat_result | None = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise ToolError(f"{path} changed while it was written; try again")
        if st is not None:
            check_regular(st, path)
            if same is not None and (st.st_dev, st.st_ino) != same:
                raise ToolError(f"{path} was replaced by another file while it was edited; read it again")
            if st.st_nlink > 1 and not hard_links:
                raise ToolError(f"{path} has {st.st_nlink} hard links (it may be a file outside the workspace too); "
                                "not written. Use bash to change it if that is intended")
            try:  # may this user write it? (renaming over it would not ask)
                os.close(os.open(loc.name, os.O_WRONLY | FILE_FLAGS, dir_fd=loc.dir_fd))
            except OSError as e:
                raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        elif same is not None:
            raise ToolError(f"{path} was removed while it was edited")
        staged = Staged(ws, path, loc.rel, data, os.dup(loc.dir_fd), loc.name)
    try:
        if st is not None and st.st_nlink > 1:
            staged.in_place = True
            return staged
        tmp = f".{staged.name[:200]}.kimik3-{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o600 if st is not None else 0o666, dir_fd=staged.dir_fd)
        except OSError as e:
            if st is None or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG):
                raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
            staged.in_place = True  # a directory where no new file can be made: the file itself
            return staged
        staged.tmp = tmp
        try:
            if st is not None:
                if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fd, st.st_uid, st.st_gid)
                    except PermissionError:  # the owner cannot be kept: write the file itself
                        staged.in_place = True
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if not staged.in_place:
                _write_all(fd, data)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        finally:
            os.close(fd)
        if staged.in_place:
            staged.discard_tmp()
        return staged
    except BaseException:
        staged.discard()
        raise


def replace(ws: Workspace, path: str, data: bytes, *, hard_links: bool, same: tuple[int, int] | None = None) -> str:
    """:func:`stage`, :func:`~kimik3.tools._limits.commit_point`, :meth:`Staged.commit`: the
    workspace-relative path written. Raises as those."""
    with stage(ws, path, data, hard_links=hard_links, same=same) as staged:
        commit_point()
        return staged.commit()
