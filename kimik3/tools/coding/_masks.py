"""The secrets a sandbox masks, by inode as well as by path (issue 39): the other names of a secret
file (hard links made before the run), and whether the secret set a running sandbox was built with
went stale (a secret replaced by rename, made after the start, linked anew).

A secret is its ``(st_dev, st_ino)``, not only its path: a hard link elsewhere opens the same
file. Finding every name of an inode would mean walking the whole file system, so
:func:`other_names` looks only where it is cheap and likely (the home, the workspace, the allowed
write paths; on the secret's own device, at most :data:`~kimik3.tools.coding._kept.MAX_WALK_DIRS`
folders each) and only for secret files whose link count says they have names elsewhere; the
names it cannot find are counted, so the caller can say so.

:class:`SecretStamp` is what a running sandbox compares before each command: ``stat`` of the
folders that hold the secret locations (a rename or a new entry there changes their mtime) and
``lstat`` of the secrets themselves (a new hard link changes a file's link count). Only when that
differs is the secret set computed again. See ``docs/sandbox.md``.
"""

from __future__ import annotations

import glob
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator

from ._kept import MAX_WALK_DIRS, under
from ._policy import HOME_SECRETS, ROOT_SECRETS, home, homes, secret_folders

__all__ = ["MAX_WATCHED_FILES", "RACY_NS", "SecretStamp", "identity", "link_counts", "other_names"]

Inode = tuple[int, int]
MAX_WATCHED_FILES = 1024
"""The files inside secret folders whose link counts a running sandbox watches (``lstat`` before
each command), the smallest folders' first: a hard link the host makes to one during the run
(``ln ~/.aws/credentials ~/notes/c``) restarts the sandbox to mask it. Past this many (a browser
profile), the rest are not watched (docs/sandbox.md)."""
RACY_NS = 50_000_000
"""A watched folder's mtime this close to the stamp (ns) is not trusted (file system clocks tick
in milliseconds)."""


def identity(paths: Iterable[str]) -> dict[str, tuple[int, int, int] | None]:
    """Each path's ``(st_dev, st_ino, st_nlink)`` by ``lstat`` (None: gone): what a secret set is."""
    out: dict[str, tuple[int, int, int] | None] = {}
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            out[p] = None
            continue
        out[p] = (st.st_dev, st.st_ino, st.st_nlink if not stat.S_ISDIR(st.st_mode) else 0)
    return out


def link_counts(paths: Iterable[str]) -> dict[str, int]:
    """Each file's link count where it has other names, else 1 (also when gone): what changes when
    a hard link to it is made, and not when it is replaced by rename (a token cache refreshed)."""
    out: dict[str, int] = {}
    for p in paths:
        try:
            n = os.lstat(p).st_nlink
        except OSError:
            n = 1
        out[p] = n if n > 1 else 1
    return out


def _files(root: str, budget: list[int], keep: Callable[[str, os.stat_result], bool] = lambda path, st: True
           ) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file below ``root`` (``root`` itself when a file), no symlink followed, within
    ``budget[0]`` folders; an entry ``keep`` refuses is neither entered nor yielded."""
    try:
        st = os.lstat(root)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            yield root, st
        return
    stack = [root]
    while stack and budget[0] > 0:
        budget[0] -= 1
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            try:
                est = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not keep(e.path, est):
                continue
            if stat.S_ISDIR(est.st_mode):
                stack.append(e.path)
            elif stat.S_ISREG(est.st_mode):
                yield e.path, est


def other_names(secrets: list[str], roots: list[str]) -> tuple[list[str], dict[str, int], list[Inode], list[str]]:
    """The other names (hard links) of the secret files in ``secrets``, looked for in ``roots``.

    Only files with more links than names inside the secrets are looked for, so a home without
    such links costs one ``lstat`` per secret file and no walk. Each root is walked without
    following symlinks, without entering a secret or another device, at most
    :data:`~kimik3.tools.coding._kept.MAX_WALK_DIRS` folders; the walk stops once every link is
    found.

    Args:
        secrets: the secret paths, resolved (folders and files).
        roots: where to look (the home, the workspace, the allowed write paths), resolved.

    Returns:
        (the names found outside the secrets, {a secret file: how many of its names were not found},
        the ``(st_dev, st_ino)`` of every secret file with more than one name: no Landlock rule may
        name one, it would open the secret by its own name too, the files inside the secret folders:
        at most :data:`MAX_WATCHED_FILES`, for :func:`link_counts`).
    """
    names: dict[Inode, list[str]] = {}
    links: dict[Inode, int] = {}
    budget = [MAX_WALK_DIRS]
    for s in secrets:
        for path, st in _files(s, budget):
            key = (st.st_dev, st.st_ino)
            links[key] = st.st_nlink
            if path not in names.setdefault(key, []):
                names[key].append(path)
    listed = set(secrets)
    per_secret: dict[str, list[str]] = {}  # the smallest secret folders first (~/.ssh before a browser's)
    for p in (p for paths in names.values() for p in paths if p not in listed):
        per_secret.setdefault(next((s for s in secrets if p.startswith(s.rstrip("/") + "/")), ""), []).append(p)
    inner = [p for files in sorted(per_secret.values(), key=len) for p in files][:MAX_WATCHED_FILES]
    missing = {k: n - len(names[k]) for k, n in links.items() if n > len(names[k])}
    found: list[str] = []
    devices = {k[0] for k in missing}
    for root in dict.fromkeys(roots):
        if not missing:
            break
        try:
            st = os.lstat(root)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_dev not in devices:
            continue
        # on the secrets' devices (a hard link cannot cross one), never into a secret
        for path, est in _files(root, [MAX_WALK_DIRS], lambda p, e: e.st_dev in devices and not under(p, secrets)):
            key = (est.st_dev, est.st_ino)
            if key in missing and path not in found:
                found.append(path)
                missing[key] -= 1
                if not missing[key]:
                    del missing[key]
                    if not missing:
                        break
    linked = [k for k, n in links.items() if n > 1]
    return found, {names[k][0]: n for k, n in missing.items()}, linked, inner


def _watched(deny: Iterable[str]) -> list[str]:
    """The folders whose entries decide the secret set: each secret pattern's existing folder
    (:func:`~._policy.secret_folders`, patterns and variable-named places included), the folders
    above those inside a home (where a missing one would appear) and those holding :data:`HOME_SECRETS`,
    :data:`ROOT_SECRETS` and the ``deny`` paths."""
    deny = list(deny)
    folders = secret_folders(deny)
    h = home()
    inside = homes(dict(os.environ))
    paths = [*(os.path.join(h, s) for s in HOME_SECRETS if h), *ROOT_SECRETS, *deny]
    above = [os.path.dirname(d) for d in folders if under(os.path.dirname(d), inside)]
    named = [os.path.dirname(p) for p in paths if not glob.has_magic(p)]  # patterns: in ``folders``
    return list(dict.fromkeys([*folders, *above, *named]))


class SecretStamp:
    """What a running sandbox's secret set was built from, cheap to compare before each command
    (see the module docstring): the folders holding secret locations (``stat``: inode, mtime)
    and the secrets themselves (:func:`identity`).

    Args:
        secrets: the secret paths the sandbox masks.
        deny: the ``--deny-read`` paths (their folders are watched too).
        inner: files inside the secret folders (their :func:`link_counts` are watched).
    """

    def __init__(self, secrets: list[str], deny: Iterable[str], inner: Iterable[str] = ()) -> None:
        self.folders = _watched(deny)
        self.secrets = list(secrets)
        self.inner = list(inner)
        self.taken = time.time_ns()
        self.state = self._now()

    def _now(self) -> tuple[list[tuple[int, int] | None], dict[str, tuple[int, int, int] | None], dict[str, int]]:
        folders: list[tuple[int, int] | None] = []
        for d in self.folders:
            try:
                st = os.stat(d)
                folders.append((st.st_ino, st.st_mtime_ns))
            except OSError:
                folders.append(None)
        return folders, identity(self.secrets), link_counts(self.inner)

    def renew(self) -> None:
        """Take the stamp again (the secret set was computed again and found the same)."""
        self.taken = time.time_ns()
        self.state = self._now()

    def moved(self) -> bool:
        """Whether a watched folder or a secret changed since the stamp (then compute the set
        again and compare with :func:`identity`); ``stat`` calls only. A folder changed less than
        :data:`RACY_NS` before the stamp counts as moved (git's "racily clean" rule: a file
        system's clock is coarse, so a change in the same tick would keep the same mtime)."""
        now = self._now()
        return now != self.state or any(f is not None and f[1] >= self.taken - RACY_NS for f in now[0])
