"""Where things lie, for the sandbox's mounts and rules (``_sandbox``; issue 39): the size of its
private ``/tmp``, the user's paths it must show although they lie in a hidden folder (the targets
of the workspace's top symlinks, a venv beside a shown ``bin``, the repository a workspace lies
in), and the allowed paths checked. See ``docs/sandbox.md``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ..._exceptions import UserError

__all__ = ["enclosing_repo", "existing", "linked_from", "prefixes", "tmpfs_bytes"]

_GIB = 1 << 30


def tmpfs_bytes(limit: int | None, total: int | None = None) -> int:
    """The size of the sandbox's private ``/tmp``: the per-process memory limit, at most a quarter
    of the memory kimik3 may use (``total``, default :func:`memory_bytes`; each tmpfs holds
    memory; issue 40)."""
    total = memory_bytes() if total is None else total
    cap = total // 4 if total else 2 * _GIB
    return min(limit, cap) if limit else cap


def memory_bytes(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> int:
    """The memory this process may use (bytes; 0 unknown): the host's (``MemTotal``), or less
    where a cgroup limits it (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, of this process's
    cgroup or a parent): a container's 24 GiB on a 1 TiB host is 24 GiB (issue 40's five tmpfs)."""
    sizes: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"{proc}/meminfo") as f:
        sizes.append(int(f.readline().split()[1]) * 1024)
    try:
        with open(f"{proc}/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:  # "0::/a/b" (v2) or "4:memory:/a/b" (v1)
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        places = [(cgroup, "memory.max")] if controllers == "" else \
            [(f"{cgroup}/memory", "memory.limit_in_bytes")] if "memory" in controllers.split(",") else []
        for root, name in places:
            parts = [p for p in path.split("/") if p]
            for n in range(len(parts), -1, -1):  # the cgroup and each parent up to the mount's root
                with contextlib.suppress(OSError, ValueError), open(os.path.join(root, *parts[:n], name)) as f:
                    sizes.append(int(f.read().strip()))  # "max" (no limit): ValueError, skipped
    sizes = [s for s in sizes if s > 0]
    return min(sizes) if sizes else 0


def linked_from(root: str) -> list[str]:
    """The targets of the symlinks at the top of the workspace when the sandbox starts (a
    ``.venv`` symlinked to a venv under ``/tmp``): the user's, shown read-only like the toolchain."""
    try:
        with os.scandir(root) as entries:
            links = [e.path for e in entries if e.is_symlink()]
    except OSError:
        return []
    return [t for t in (os.path.realpath(p) for p in links) if os.path.exists(t)]


def prefixes(paths: list[str]) -> list[str]:
    """The prefix of each ``bin`` folder in ``paths`` (a ``PATH`` entry ``/tmp/x/.venv/bin``): its
    programs find what they need beside it (a venv's ``python`` its ``pyvenv.cfg``, or it runs as
    the base interpreter without the venv's packages; a conda environment's ``lib``; node's
    ``lib/node_modules``)."""
    return [os.path.dirname(p) for p in paths if os.path.basename(p) == "bin" and os.path.dirname(p) != "/"]


def enclosing_repo(root: str) -> list[str]:
    """The git repository a workspace lies in below its top (``-w /tmp/clone/sub``): its top folder
    and, where its ``.git`` is a file, the git directory named there and that one's common
    directory, so that git reads (``git status``, ``log``) work inside where the repository lies
    in a hidden folder (issue 39). Only a repository of this user (owner checked); shown
    read-only. Empty when the workspace is not in one, or is its top."""
    for d in Path(root).parents:
        dot = d / ".git"
        if not os.path.lexists(dot):
            continue
        with contextlib.suppress(OSError):
            if os.stat(d).st_uid != os.getuid():
                return []
        out = [str(d)]
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if dot.is_file() and not dot.is_symlink():
                named = dot.read_text().partition("gitdir:")[2].strip()
                gitdir = os.path.realpath(os.path.join(d, named))
                out.append(gitdir)
                common = os.path.join(gitdir, "commondir")
                if os.path.isfile(common):
                    with open(common) as f:
                        out.append(os.path.realpath(os.path.join(gitdir, f.read().strip())))
        return [p for p in out if os.path.isdir(p)]
    return []


def existing(paths: Any, what: str) -> list[str]:
    """``paths`` resolved, each an existing path.

    Raises:
        UserError: a path that does not exist, or a lone string instead of a list.
    """
    if isinstance(paths, (str, os.PathLike)):
        raise UserError(f"{what} takes a list of paths, not one path ({paths!r})")
    out = []
    for p in paths:
        real = os.path.realpath(os.path.expanduser(os.fspath(p)))
        if not os.path.exists(real):
            raise UserError(f"{what}: {p} does not exist")
        out.append(real)
    return out
