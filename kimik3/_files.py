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

__all__ = ["NotRegularFileError", "open_regular", "read_regular_bytes"]


class NotRegularFileError(OSError):
    """The path names something other than a regular file (a FIFO, device, socket, directory).

    An ``OSError`` so callers that already turn read errors into their typed error keep doing so.
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


def read_regular_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file (see :func:`open_regular` for what is refused).

    Raises:
        NotRegularFileError: not a regular file.
        OSError: the file cannot be read.
    """
    with open_regular(path) as f:
        return f.read()
