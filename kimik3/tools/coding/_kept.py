"""What stays read-only inside the sandbox although it lies in the workspace: what programs run
*outside* the sandbox act on, so a command must not write it. That is the git control data of the
workspace's repositories (a planted ``core.fsmonitor``, hook or filter, or a ``commondir`` /
``.git`` file pointing at a git directory that holds one, runs the next time the user runs git
there) and the session files kimik3 writes (an approval appended there would be acted on by a
resume). See ``docs/sandbox.md``.
"""

from __future__ import annotations

import os

__all__ = ["MAX_WALK_DIRS", "kept_read_only", "under"]


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


def kept_read_only(root: str, protected: list[str], max_dirs: int = MAX_WALK_DIRS) -> list[str]:
    """What stays read-only inside the sandbox although it lies in the workspace ``root``: the git
    control data of every repository found there now (each ``.git`` folder or file, the git
    directory a ``.git`` file names and the ``commondir`` of each git directory, where they lie
    in the workspace; nested repositories in the first :data:`MAX_WALK_DIRS` folders, never
    through a symlink but a symlinked ``.git``'s target) and the ``protected`` files that exist."""
    found: list[str] = [p for p in protected if os.path.lexists(p)]
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
