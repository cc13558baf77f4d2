"""A git index file read for its gitlinks (``index-format.txt``, versions 2 to 4; SHA-1 or
SHA-256 repositories), bounded: what the sandbox's walk (:func:`~._kept.kept_paths`) needs to keep
a submodule's empty folder read-only. An index over :data:`MAX_INDEX_BYTES`, sparse
(:func:`is_sparse`: also the test the checkpoint copies use), not a regular file, or not parsed is
not read, and :func:`gitlinks` says why; parsing is linear in the index's size, however it is
crafted.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct

__all__ = ["MAX_GITLINKS", "MAX_INDEX_BYTES", "gitlinks", "is_sparse"]

MAX_GITLINKS = 10_000
"""Gitlinks read from one index at most (more: the index's gitlinks are said to be unknown)."""
MAX_INDEX_BYTES = 256 << 20
"""A git index read for its gitlinks at most this large (a larger or sparse one is not read: said)."""
_MAX_NAME = 4096  # a path in an index longer than this: not an index (git's own PATH_MAX)


def is_sparse(st: os.stat_result) -> bool:
    """Whether the file of ``st`` has holes: fewer bytes allocated on disk than its size, by more
    than a block (``st_blocks`` counts 512-byte units, POSIX). A 3 GB file of holes is cheap to
    make and costly to copy."""
    return st.st_blocks * 512 + 4096 < st.st_size


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """git's offset varint (``decode_varint``, varint.c): (value, next position)."""
    c = data[pos]
    pos += 1
    value = c & 127
    while c & 128:
        c = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (c & 127)
    return value, pos


def _index_gitlinks(data: bytes, hash_len: int) -> list[bytes]:
    """The paths of the gitlink entries (mode 160000) of an index file's bytes (index-format.txt:
    versions 2 to 4). Raises ValueError, IndexError or struct.error on bytes it cannot parse,
    OverflowError past :data:`MAX_GITLINKS`. Linear in the index's size, however it is crafted."""
    if data[:4] != b"DIRC":
        raise ValueError("not an index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise ValueError(f"index version {version}")
    pos, prev, found = 12, bytearray(), []
    for _ in range(count):
        mode = struct.unpack_from(">I", data, pos + 24)[0]
        flags = struct.unpack_from(">H", data, pos + 40 + hash_len)[0]
        p = pos + 42 + hash_len + (2 if version >= 3 and flags & 0x4000 else 0)
        if version == 4:  # the name is the previous one, less its last ``strip`` bytes, and these
            strip, p = _varint(data, p)
            end = data.index(b"\0", p)
            if strip > len(prev):
                raise ValueError("bad prefix")
            del prev[len(prev) - strip :]  # in place: a crafted index costs its size, not its square
            prev += data[p:end]
            pos = end + 1
        else:
            end = data.index(b"\0", p)
            prev[:] = data[p:end]
            pos += (end - pos + 8) & ~7
            if data[end:pos].strip(b"\0") or pos > len(data):  # the padding is NULs
                raise ValueError("bad padding")
        if len(prev) > _MAX_NAME or mode >> 12 not in (0o10, 0o12, 0o16, 0o4):  # file, symlink, gitlink, dir
            raise ValueError("bad entry")
        if mode >> 12 == 0o16:
            found.append(bytes(prev))
            if len(found) > MAX_GITLINKS:
                raise OverflowError(f"over {MAX_GITLINKS} gitlinks")
    rest = data[pos:]  # extensions (signatures "A".."Z" first), then the checksum
    if len(rest) < hash_len or (len(rest) > hash_len and not rest[:1].isupper()):
        raise ValueError("no checksum where it must be")
    return found


def gitlinks(gitdir: str) -> list[str] | str:
    """The work-tree-relative paths of the gitlinks (submodules, nested repositories added as
    such) in the index of the git directory ``gitdir`` (and the shared index of a split one);
    or, as a ``str``, why they cannot be known (an index over :data:`MAX_INDEX_BYTES`, sparse,
    not a regular file, not parsed). No index: none."""
    found: list[str] = []
    names = ["index"]
    with contextlib.suppress(OSError):
        names += sorted(n for n in os.listdir(gitdir) if n.startswith("sharedindex."))
    for name in names:
        try:
            fd = os.open(os.path.join(gitdir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"its {name} cannot be read ({e.strerror or e})"
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return f"its {name} is not a regular file"
            if st.st_size > MAX_INDEX_BYTES or is_sparse(st):
                return f"its {name} is {'sparse' if is_sparse(st) else 'over'} ({st.st_size} bytes); not read"
            data = f.read(MAX_INDEX_BYTES + 1)
        for hash_len in (20, 32):  # SHA-1, SHA-256 repositories
            try:
                found += [os.fsdecode(p) for p in _index_gitlinks(data, hash_len)]
                break
            except OverflowError as e:
                return f"its {name} has {e}"
            except (ValueError, IndexError, struct.error):
                continue
        else:
            return f"its {name} could not be parsed"
    return found
