"""Where a session's lines live: the :class:`SessionStore` interface behind
:class:`~kimik3.agents.SessionWriter` and :class:`~kimik3.agents.SessionLog`, the JSONL file
(:class:`FileStore`, the default) and :class:`MemoryStore` (tests, or a base for a store of one's own).

A store keeps bytes, nothing else: the session format, its crash-safety rules (a torn last line
is dropped, a complete one lacking its newline kept) and the records' meaning are
:mod:`._session`'s, once for every store. So a user who keeps sessions elsewhere (a database
row, an object store) implements five methods and passes the store where a path goes
(``Agent.run(session=store)``, ``Agent.resume(store)``, ``SessionLog.read(store)``); the agent
is not touched. The anchor is openai-agents' ``Session`` protocol (one object owns a
conversation's storage; ``SQLiteSession`` and others implement it), here at the level of
kimik3's record lines so that every reader and every rule stays one (issue 42).

The file store's rules: only regular files are read or written (a FIFO or a device is refused,
never opened for blocking I/O); no directory is created; one writer at a time holds an exclusive
``flock`` (a second gets a :class:`~kimik3.SessionError` naming the holder: ``pid N on host H``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from .._exceptions import SessionError

__all__ = ["FileStore", "MemoryStore", "SessionStore", "store_for"]


@runtime_checkable
class SessionStore(Protocol):
    """The bytes of one session, as lines (UTF-8 JSON, each ending with ``\\n``).

    Attributes:
        path: where the session is, as a path: the file for :class:`FileStore`; for another
            store a name (``memory:…``) that messages show and that harness hooks derive the
            names of their side files from (sub-agent sessions, checkpoint copies).

    A writer calls :meth:`acquire` once, then :meth:`truncate` / :meth:`append` any number of
    times, then :meth:`release`; a reader calls :meth:`read` only.
    """

    path: Path

    def read(self) -> bytes:
        """Every byte stored so far (no lock taken).

        Raises:
            SessionError: nothing is stored there, or it cannot be read.
        """
        ...

    def acquire(self, *, create: bool) -> bytes:
        """Take exclusive use (one writer at a time) and return the bytes stored so far.

        Args:
            create: an empty session is made when none is there (else SessionError).

        Raises:
            SessionError: another writer holds it (named), or it cannot be opened.
        """
        ...

    def truncate(self, size: int) -> None:
        """Cut the stored bytes to ``size`` (a torn last line of a crash)."""
        ...

    def append(self, data: bytes) -> None:
        """Append whole lines, durable against the writer's own crash when this returns."""
        ...

    def release(self) -> None:
        """Give exclusive use back (idempotent)."""
        ...


def _open_regular(path: Path, flags: int) -> int:
    """``os.open`` that never blocks on a FIFO and refuses anything but a regular file."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except FileNotFoundError as e:
        where = "directory" if not path.parent.is_dir() else "file"
        raise SessionError(f"cannot open session {path}: no such {where}") from e
    except OSError as e:  # ENXIO: a FIFO with no reader; EISDIR; EACCES; ELOOP: O_NOFOLLOW on a symlink
        if e.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise SessionError(f"{path} is a symlink; a session written must be a regular file (issue 40: a "
                               "planted link would be followed)") from e
        raise SessionError(f"cannot open session {path}: {e.strerror or e}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SessionError(f"{path} is not a regular file; a session must be one")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int, path: Path) -> bytes:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError as e:
        raise SessionError(f"cannot read session {path}: {e}") from e
    return b"".join(chunks)


def _lock_pid(fd: int) -> int | None:
    """The pid that took the flock on ``fd``'s file, from ``/proc/locks`` (Linux); None: unknown."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == ident:
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def _lock_holder(pid: int | None) -> str:
    """``pid N on host H`` for the holder :func:`_lock_pid` found."""
    if pid is None:
        return "another process"
    mine = " (this process)" if pid == os.getpid() else ""
    return f"pid {pid}{mine} on host {socket.gethostname()}"


_FORK_GRACE_S = 2.0
"""How long a lock that this process took (or nobody visibly holds) is waited for: a child
forked by another thread of this process (a tool's subprocess) shares every open file, the
lock of a session just closed included, until it execs and its close-on-exec files close."""


def _lock(fd: int, path: Path) -> None:
    """Take the exclusive flock on ``fd``, or raise SessionError naming the holder."""
    deadline = time.monotonic() + _FORK_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise SessionError(f"cannot lock session {path}: {e}") from e
        pid = _lock_pid(fd)
        if pid not in (None, os.getpid()) or time.monotonic() > deadline:
            raise SessionError(f"session {path} is in use by {_lock_holder(pid)}; one run may write a session "
                               "at a time")
        time.sleep(0.01)


class FileStore:
    """A session kept in a JSONL file (the default store; see the module doc for its rules).

    Args:
        path: the file; its directory must exist.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = -1
        self._made = False

    def read(self) -> bytes:
        """The file's bytes, read through one non-blocking open (a FIFO is refused)."""
        fd = _open_regular(self.path, os.O_RDONLY)
        try:
            return _read_all(fd, self.path)
        finally:
            os.close(fd)

    def acquire(self, *, create: bool) -> bytes:
        """Open the file for appending (creating it when ``create``), take its exclusive flock
        (a lock of this process is waited for up to 2 s: a tool's subprocess forked meanwhile
        shares it until its exec) and return its bytes, read under the lock."""
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | (os.O_CREAT if create else 0)  # never a planted link
        existed = os.path.lexists(self.path)
        fd = _open_regular(self.path, flags)
        self._made = not existed  # made here: removed again if released before anything was kept
        try:
            _lock(fd, self.path)
            data = _read_all(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return data

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def append(self, data: bytes) -> None:
        """Append ``data`` whole or not at all: a failed write (ENOSPC: a full disk, EDQUOT, EIO)
        is cut back to the record before it and is a :class:`~kimik3.SessionError` (issue 40)."""
        view = memoryview(data)
        size = os.fstat(self._fd).st_size
        try:
            while view:  # one O_APPEND write of a whole line: another reader sees it whole or not at all
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)  # no torn line
            raise SessionError(f"cannot write session {self.path}: {e.strerror or e}; nothing of this record "
                               "was kept") from e

    def release(self) -> None:
        if self._fd >= 0:
            if self._made and os.fstat(self._fd).st_size == 0:  # made here, header unwritten (a full
                with contextlib.suppress(OSError):  # disk): no 0-byte file that is no session
                    os.unlink(self.path)
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = -1


class MemoryStore:
    """A session kept in memory (tests; or a starting point for a store of one's own).

    Args:
        name: what messages call it (``path`` becomes ``memory:<name>``).
        data: the bytes it starts with (b"": no session yet).

    Attributes:
        data: the stored bytes (a test reads or edits them).
        reads: how many times the bytes were read (:meth:`read` and :meth:`acquire`).
        acquired: how many times exclusive use was taken.
    """

    def __init__(self, name: str = "session", data: bytes = b"") -> None:
        self.path = Path(f"memory:{name}")
        self.data = bytearray(data)
        self.reads = 0
        self.acquired = 0
        self._held = False

    def read(self) -> bytes:
        if not self.data:
            raise SessionError(f"cannot open session {self.path}: no such session")
        self.reads += 1
        return bytes(self.data)

    def acquire(self, *, create: bool) -> bytes:
        if self._held:
            raise SessionError(f"session {self.path} is in use by this process; one run may write a session at a time")
        if not self.data and not create:
            raise SessionError(f"cannot open session {self.path}: no such session")
        self._held = True
        self.acquired += 1
        self.reads += 1
        return bytes(self.data)

    def truncate(self, size: int) -> None:
        del self.data[size:]

    def append(self, data: bytes) -> None:
        self.data += data

    def release(self) -> None:
        self._held = False


def store_for(session: str | os.PathLike[str] | SessionStore) -> SessionStore:
    """``session`` as a store: a path becomes a :class:`FileStore`, a store stays itself."""
    if isinstance(session, (str, os.PathLike)):
        return FileStore(session)
    return session
