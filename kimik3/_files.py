"""Opening files named by callers without blocking: regular files only.

A path may name a FIFO, a character device or a socket; a plain ``open()`` of a FIFO waits for
a writer forever (and a read of ``/dev/zero`` never ends). :func:`open_regular` refuses anything
but a regular file *before* an open that can block: ``os.stat`` first, then an
``O_NONBLOCK`` open and an ``fstat`` of the opened descriptor (the file may have been swapped in
between), so neither step can wait.
"""

from __future__ import annotations

import os
import stat
from typing import IO

__all__ = ["FileTooLargeError", "NotRegularFileError", "open_regular", "read_regular_bytes"]


class NotRegularFileError(OSError):
    """The path names something other than a regular file (a FIFO, device, socket, directory).

    An ``OSError`` so callers that already turn read errors into their typed error keep doing so.
    """

    def __str__(self) -> str:
        return str(self.strerror)


class FileTooLargeError(OSError):
    """A file is larger than the bound its reader set (:func:`read_regular_bytes`'s ``max_bytes``).

    An ``OSError`` for the same reason as :class:`NotRegularFileError`.
    """

    def __str__(self) -> str:
        return str(self.strerror)


def _check(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise NotRegularFileError(0, f"{path!r} is {kind}", path)


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a regular file for binary reading, refusing anything else without blocking.

    Args:
        path: the file's path.

    Returns:
        A binary file object positioned at 0 (blocking mode restored).

    Raises:
        NotRegularFileError: the path names a FIFO, device, socket or directory.
        OSError: the file cannot be read (missing, permission).
    """
    name = os.fspath(path)
    _check(os.stat(name).st_mode, name)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _check(os.fstat(fd).st_mode, name)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | os.PathLike[str], max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file (see :func:`open_regular` for what is refused).

    Args:
        path: the file's path.
        max_bytes: the most bytes read; a larger file is refused before it is read whole (a
            link to a huge or sparse file cannot exhaust memory). None: no bound.

    Raises:
        NotRegularFileError: not a regular file.
        FileTooLargeError: more than ``max_bytes`` bytes.
        OSError: the file cannot be read.
    """
    with open_regular(path) as f:
        if max_bytes is None:
            return f.read()
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileTooLargeError(0, f"{os.fspath(path)!r} is larger than {max_bytes:,} bytes", os.fspath(path))
    return data
