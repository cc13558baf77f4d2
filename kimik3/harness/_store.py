"""The copy store of checkpoints outside git (issue 40): where the copies of the files a turn's
file tools name are kept, how they are written and read back.

- **Outside the workspace.** The store is ``<session file>.checkpoints`` where that lies outside
  the workspace, else ``${KIMIK3_HOME:-~/.kimik3}/checkpoints/<session name>-<hash>`` (the hash:
  SHA-256 of the session's resolved path, 16 hex digits), made ``0700``. Wherever it lies, the
  run keeps it from every tool (:meth:`~kimik3.tools.coding._kept.SessionFiles.keep`: the file
  tools refuse it, the sandbox binds it read-only).
- **A digest checked before restore.** Each copy's SHA-256, taken while it is written, is in the
  checkpoint record (``"copied"``); undo reads the copy back and refuses one whose digest differs
  (a copy edited since), naming it.
- **No symlink followed.** The store, its ``turn-N`` folders and the copies are opened with
  ``O_NOFOLLOW`` from the store's descriptor (``openat``); a store that is a symlink, or not the
  user's own, is refused.
- **Nothing copied blindly.** A file over :data:`MAX_COPY_BYTES` or a sparse one (holes: fewer
  blocks on disk than its size) is not copied; the record's ``uncovered`` says so when the turn
  changed it, and undo refuses it by name (``--partial`` restores the rest). A repository's
  index seeds a git snapshot's private one only under the same rule (:func:`seed_index`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import warnings
from pathlib import Path

from .._exceptions import CheckpointError
from ..engines import kimik3_home
from ..tools.coding.api import is_sparse

__all__ = ["MAX_COPY_BYTES", "STORE_WHAT", "copy_into", "default_store", "not_copied", "not_hashed", "open_store",
           "open_turn", "read_copy", "resolved", "seed_index", "store_candidates"]

MAX_COPY_BYTES = 256 << 20
"""A file larger than this (bytes) is not copied into a checkpoint (the record says so)."""
STORE_WHAT = "kimik3's checkpoint store (kimik3 undo restores from it)"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def resolved(store: str | os.PathLike[str]) -> Path:
    """``store`` with the folders above it resolved now (the store itself never followed): a
    symlink on the way that a command re-points later (``ws/lnk/run.jsonl``'s ``lnk``) no longer
    leads kimik3's later writes elsewhere."""
    path = Path(store)
    return Path(os.path.realpath(path.parent)) / path.name


def store_candidates(session: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(``<session>.checkpoints`` beside the session, the one under ``${KIMIK3_HOME}/checkpoints``),
    each :func:`resolved`."""
    path = Path(session)
    key = hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:16]
    return resolved(path.with_name(path.name + ".checkpoints")), resolved(kimik3_home() / "checkpoints" /
                                                                          f"{path.name}-{key}")


def default_store(session: str | os.PathLike[str], root: Path) -> Path:
    """The store of ``session``'s copies (:func:`resolved`): beside it unless that lies in the
    workspace ``root``."""
    beside, cached = store_candidates(session)
    real = str(beside)
    inside = real == str(root) or real.startswith(str(root).rstrip("/") + "/")
    return cached if inside else beside


def open_store(store: Path) -> int:
    """The store's directory descriptor (made ``0700`` when missing, its parents too).

    Raises:
        CheckpointError: the store is a symlink, not a directory, or not the user's own.
    """
    with contextlib.suppress(FileExistsError):
        store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.mkdir(store, 0o700)
    try:
        fd = os.open(store, _DIR)
    except OSError as e:
        raise CheckpointError(f"the checkpoint store {store} cannot be used ({e.strerror or e}; a symlink is "
                              "never followed)") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise CheckpointError(f"the checkpoint store {store} belongs to another user (uid {st.st_uid})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.fchmod(fd, 0o700)
    return fd


def open_turn(store_fd: int, turn: int, *, create: bool) -> int | None:
    """The descriptor of ``turn-<turn>`` in the store (made when ``create``); None when missing."""
    name = f"turn-{turn}"
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=store_fd)
    try:
        return os.open(name, _DIR, dir_fd=store_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError(f"the checkpoint folder {name} cannot be used ({e.strerror or e})") from None


def not_hashed(top: Path, listed: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The files of ``listed`` (NUL-separated paths relative to the work tree's ``top``: what git
    checkpoints would hash) that are sparse or over :data:`MAX_COPY_BYTES`, the limits of the copy
    kind: ``{path: (why, (size, blocks, mtime_ns, inode))}``. git would read each in full (``truncate
    -s 8G`` costs a checkpoint minutes and its disk), so a snapshot leaves them out (issue 40).
    Never follows a symlink; folders and missing paths are left out."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for raw in dict.fromkeys(listed.split(b"\0")):
        if not raw:
            continue
        try:
            st = os.lstat(top / os.fsdecode(raw))
        except OSError:
            continue
        why = not_copied(st) if stat.S_ISREG(st.st_mode) else None
        if why is not None:
            out[os.fsdecode(raw)] = (why.replace("not copied", "not in the checkpoint", 1),
                                     (st.st_size, st.st_blocks, st.st_mtime_ns, st.st_ino))
    return out


def not_copied(st: os.stat_result) -> str | None:
    """Why a file of ``st`` is not copied (sparse, or over :data:`MAX_COPY_BYTES`), or None."""
    if is_sparse(st):
        return f"not copied: a sparse file ({st.st_size} bytes, {st.st_blocks * 512} on disk)"
    if st.st_size > MAX_COPY_BYTES:
        return f"not copied: {st.st_size} bytes, over the {MAX_COPY_BYTES} bytes a checkpoint copies"
    return None


def copy_into(turn_fd: int, name: str, src: int, st: os.stat_result) -> str:
    """Copy the open file ``src`` (``st``: its ``fstat``) to a new ``name`` in ``turn_fd`` (never
    through a symlink, never over a file), with its mode and times; its SHA-256. At most
    :data:`MAX_COPY_BYTES` are read (a file that grew meanwhile is cut: its digest says so)."""
    h = hashlib.sha256()
    dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=turn_fd)
    try:
        left = MAX_COPY_BYTES
        while left > 0 and (chunk := os.read(src, min(_CHUNK, left))):
            h.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view):]
            left -= len(chunk)
        os.fchmod(dst, stat.S_IMODE(st.st_mode))
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(dst)
    return h.hexdigest()


def read_copy(folder: Path, name: str, want: str | None, rel: str) -> tuple[bytes, os.stat_result]:
    """The bytes and ``fstat`` of the copy ``name`` in ``folder`` (a store's ``turn-N``), opened
    with ``O_NOFOLLOW`` from the store's descriptor; checked against ``want`` (its recorded
    SHA-256; None: an older record without one).

    Raises:
        CheckpointError: a symlink on the way, not a regular file, over :data:`MAX_COPY_BYTES`,
            or bytes that are not the ones kimik3 stored (naming ``rel`` and the copy).
    """
    where = folder / name
    fds: list[int] = []
    try:
        fds.append(os.open(folder.parent, _DIR))
        fds.append(os.open(folder.name, _DIR, dir_fd=fds[-1]))
        fd = os.open(name, _READ, dir_fd=fds[-1])
    except OSError as e:
        raise CheckpointError(f"cannot read the copy of {rel} ({where}): {e.strerror or e} (a symlink is never "
                              "followed); nothing was changed") from None
    finally:
        for d in fds:
            os.close(d)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_COPY_BYTES:
            raise CheckpointError(f"the copy of {rel} ({where}) is not a regular file of at most {MAX_COPY_BYTES} "
                                  "bytes; nothing was changed")
        data = f.read(MAX_COPY_BYTES + 1)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise CheckpointError(f"the copy of {rel} ({where}) is not the one kimik3 stored (its SHA-256 differs from "
                              "the checkpoint record's): it was changed after the turn; nothing was changed")
    return data, st


def seed_index(src: Path, dst: Path) -> None:
    """Copy the repository's index (its stat cache seeds the private one; its mtime too: git's
    racy-clean check needs it): never through a symlink, and not at all when it is sparse or
    over :data:`MAX_COPY_BYTES` (a model-made repository's 3 GB of holes); git then
    hashes the files afresh, which only costs time (a :class:`RuntimeWarning` says so)."""
    try:
        fd = os.open(src, _READ)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        if is_sparse(st) or st.st_size > MAX_COPY_BYTES:
            warnings.warn(f"kimik3: the git index {src} is {'sparse' if is_sparse(st) else 'too large'} "
                          f"({st.st_size} bytes); not copied: checkpoints there hash every file", RuntimeWarning,
                          stacklevel=3)
            return
        with open(dst, "xb") as out:
            shutil.copyfileobj(f, out)
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
