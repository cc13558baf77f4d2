"""What stays read-only inside the sandbox although it lies in the workspace: what programs run
*outside* the sandbox act on, so a command must not write it. That is the git control data of the
workspace's repositories (a planted ``core.fsmonitor``, hook or filter, or a ``commondir`` /
``.git`` file pointing at a git directory that holds one, runs the next time the user runs git
there) and the session files kimik3 writes (an approval appended there would be acted on by a
resume). See ``docs/sandbox.md``. The file tools, which run in kimik3's own process, refuse the
session files too (:class:`SessionFiles`). What the sandbox hides and shows is ``_policy``'s.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..._exceptions import ToolError

__all__ = ["MAX_WALK_DIRS", "SessionFiles", "kept_read_only", "under"]


def under(path: str, parents: list[str]) -> bool:
    """Whether ``path`` is one of ``parents`` or inside one (plain string paths, resolved)."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


MAX_WALK_DIRS = 20_000
"""Folders of the workspace looked through for nested repositories when the sandbox starts."""


def _git_pointer(path: str, name: str, base: str) -> str | None:
    """The path a ``.git`` file (``gitdir: X``) or a ``commondir`` file names, resolved (relative
    to ``base``); None when ``path`` is no such regular file."""
    try:
        fd = os.open(os.path.join(path, name) if name else path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not os.path.isfile(f"/proc/self/fd/{f.fileno()}"):
            return None
        text = os.fsdecode(f.read(4096)).strip()
    if not name:
        if not text.startswith("gitdir:"):
            return None
        text = text.removeprefix("gitdir:").strip()
    return os.path.realpath(os.path.join(base, text)) if text else None


def kept_read_only(root: str, max_dirs: int = MAX_WALK_DIRS, links: dict[str, str] | None = None) -> list[str]:
    """The git control data that stays read-only inside the sandbox although it lies in the
    workspace ``root``: that of every repository found there now (each ``.git`` folder or file,
    the git directory a ``.git`` file names and the ``commondir`` of each git directory, where they
    lie in the workspace; nested repositories in the first :data:`MAX_WALK_DIRS` folders, never
    through a symlink but a symlinked ``.git``'s target). ``links`` gets each ``.git`` that is a
    symlink (its path -> what it reads), which no bind mount can keep (see ``_git_links``)."""
    found: list[str] = []
    stack, seen = [root], 0
    while stack and seen < max_dirs:
        here = stack.pop()
        seen += 1
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            if entry.name != ".git":
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                continue
            gitdirs = []
            if entry.is_symlink():
                gitdirs.append(os.path.realpath(entry.path))
                if links is not None:
                    with contextlib.suppress(OSError):
                        links[entry.path] = os.readlink(entry.path)
            elif entry.is_dir():
                found.append(entry.path)
                gitdirs.append(entry.path)
            else:
                found.append(entry.path)
                target = _git_pointer(entry.path, "", here)
                gitdirs += [target] if target else []
            for gitdir in gitdirs:
                common = _git_pointer(gitdir, "commondir", gitdir)
                found += [gitdir, *([common] if common else [])]
    return [p for p in dict.fromkeys(found) if under(p, [root]) and p != root and os.path.lexists(p)]


class SessionFiles:
    """kimik3's record of the run: the session file and its sub-agents' sessions beside it
    (``<stem>.task-*.jsonl`` in the session's directory, also ones made later in the run; see
    :mod:`kimik3.harness._tasks`). The file tools refuse to read or write them (a forged record,
    an approval of a deferred call, would be acted on by the next resume) and the sandbox binds the
    existing ones read-only. Set by the run's hooks (:class:`kimik3.harness.SandboxHooks`) at the
    run's start; a session writer's lock is an ``flock`` on the file itself (no lock file).

    Attributes:
        path: the run's session file, resolved; None: the run records no session.
    """

    def __init__(self) -> None:
        self.path: str | None = None

    def set(self, path: str | os.PathLike[str] | None) -> None:
        """Make ``path`` (None: none) the run's session file."""
        self.path = os.path.realpath(os.fspath(path)) if path is not None else None

    def _named(self, name: str) -> bool:
        assert self.path is not None
        base = os.path.basename(self.path)
        stem = Path(base).stem
        return name == base or (name.startswith(f"{stem}.task-") and name.endswith(".jsonl"))

    def existing(self) -> list[str]:
        """The session file and its sub-agents' sessions that exist now (resolved paths)."""
        if self.path is None:
            return []
        folder = os.path.dirname(self.path)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        return [os.path.join(folder, n) for n in names if self._named(n)]

    def check(self, dir_fd: int, name: str, path: str, st: os.stat_result | None) -> None:
        """Refuse ``name`` in the open directory ``dir_fd`` when it is one of these files: the
        same name in the session's directory (however the directory was reached), or the same
        file (``st``: its ``lstat``, None when missing) under another name (a hard link).

        Raises:
            ToolError: it is kimik3's record of the run (``path`` as the tool was given it).
        """
        if self.path is None:
            return
        hit = False
        if self._named(name):
            try:
                here, there = os.fstat(dir_fd), os.stat(os.path.dirname(self.path))
                hit = (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
            except OSError:
                hit = False
        if not hit and st is not None and st.st_nlink > 1:
            for p in self.existing():
                try:
                    other = os.stat(p, follow_symlinks=False)
                except OSError:
                    continue
                hit = hit or (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
        if hit:
            raise ToolError(f"{path} is kimik3's record of this run (its session file or a sub-agent's); the file "
                            "tools do not read or write it")
