"""A ``.git`` that is a symlink: the sandbox binds its target read-only, but a bind mount cannot
cover the symlink itself, so a command may remove it and make a repository of its own there
(``rm .git && git init .`` and a planted ``core.fsmonitor``, run by the user's next ``git
status``). Each ``.git`` symlink found when the sandbox starts is checked after each foreground
command, each ``read_output`` and the run's end; one that changed is restored from outside the
sandbox: what stands there is moved aside to ``.git.kimik3-replaced-<n>`` beside it, and the
symlink is made again. See ``docs/sandbox.md``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

from ..._exceptions import ToolError
from ._paths import Workspace, show_path

__all__ = ["restore_git_links"]


def _restore(ws: Workspace, rel: str, target: str) -> str | None:
    """Put the symlink ``rel`` -> ``target`` back if it changed; what was done, in words, or None."""
    try:
        with ws.locate(rel, follow_symlinks=False, literal=True) as loc:  # no symlink on the way
            assert loc.name is not None
            try:
                now: str | None = os.readlink(loc.name, dir_fd=loc.dir_fd)
            except FileNotFoundError:
                now = None
            except OSError:  # not a symlink (a folder, a file)
                now = ""
            if now == target:
                return None
            aside = None
            if now is not None:  # something else stands there: moved aside, kept
                for n in range(1, 1000):
                    name = f"{loc.name}.kimik3-replaced-{n}"
                    try:
                        os.stat(name, dir_fd=loc.dir_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        with contextlib.suppress(FileNotFoundError):
                            os.rename(loc.name, name, src_dir_fd=loc.dir_fd, dst_dir_fd=loc.dir_fd)
                            aside = name
                        break
            os.symlink(target, loc.name, dir_fd=loc.dir_fd)
    except (ToolError, OSError) as e:
        return f"the symlink {show_path(rel)} (-> {target}) changed and could not be restored: {e}"
    moved = f"; what the command put there is now {show_path(str(Path(rel).parent / aside))}" if aside else ""
    return f"the symlink {show_path(rel)} (-> {target}) was replaced or removed; kimik3 restored it{moved}"


def restore_git_links(root: Path, links: dict[str, str]) -> list[str]:
    """Restore each ``.git`` symlink of ``links`` (workspace-relative path -> its target, as read
    when the sandbox started) that is no longer that symlink; a line for each one restored (also
    given as a :class:`RuntimeWarning`). Never follows a symlink on the way (a folder on the
    path that became a symlink: that one is reported, not restored)."""
    ws = Workspace(root)
    notes = [note for rel, target in links.items() if (note := _restore(ws, rel, target))]
    for note in notes:
        warnings.warn(f"kimik3: {note}", RuntimeWarning, stacklevel=2)
    return notes
