"""What kimik3 or git act on after the model's turn, which no tool may write (issue 40): one list,
applied to the file tools (in kimik3's own process: refused at write time, a ToolError the model
reads) and to ``bash`` (the sandbox binds the same list read-only; ``_sandbox``).

- **Git control data of every repository**, made before or during the run: any path through a
  component named ``.git`` (a folder or a ``gitdir:`` file), and any folder that is a git
  directory by git's own test (``HEAD`` with ``objects`` and ``refs``, or ``HEAD`` with
  ``commondir``: a bare repository, the one a ``.git`` file names), a common directory
  (``config``, ``objects`` and ``refs``: what a ``commondir`` file may name), or would become one
  by the write. A planted ``core.fsmonitor``, hook or filter runs at the user's next ``git status``; a
  rewritten ``HEAD`` or a deleted ref loses a branch. The file tools decide this at write time
  (:func:`check_git_write`, on the walk's own descriptors), so a repository made mid-run, one
  planted in an uninitialised submodule's (gitlink's) folder, or one past any walk is covered.
  For the sandbox, which must name paths when it starts, :func:`kept_paths` walks the workspace:
  each repository's ``.git``, the git directory a ``.git`` file names and its ``commondir``, and
  each gitlink folder that has no ``.git`` yet (read from the repository's index: a repository
  made there runs at the top repository's ``git status``: :mod:`._git_index`), and each folder that is a git
  directory by git's own test whatever its name (a bare ``origin.git``). A walk cut at
  :data:`MAX_WALK_DIRS` folders says so and keeps the folders it did not look through read-only;
  a folder of the user's it cannot list (``chmod 000``, which a command may undo) is kept whole, said.
- **What a repository's configuration names** in the workspace (:func:`._git_config.config_named`: an
  ``include.path`` file, the ``core.hooksPath`` folder, a filter's program), and git's global
  configuration where it lies there (``-w $HOME``; ``harness._harness`` keeps both).
- **kimik3's own records**: the run's session file and its sub-agents' sessions
  (:class:`SessionFiles`; the file tools refuse to read them too), and the folders registered with
  :meth:`SessionFiles.keep`: the checkpoint store (``kimik3 undo`` restores from it) and the
  workspace's Agent Skills (read into later prompts).

See ``docs/sandbox.md`` ("What no tool writes"). What the sandbox hides and shows is ``_policy``'s.
Reading a git index is :mod:`._git_index`'s; what a repository's configuration names, and the
repositories a command made that name programs, :mod:`._git_config`'s.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..._exceptions import ToolError
from .._failures import kept_write
from ._git_index import gitlinks

__all__ = ["GIT_NAME", "MAX_WALK_DIRS", "KeptPaths", "SessionFiles", "check_git_write", "git_dir_at", "git_pointer",
           "kept_paths", "kept_read_only", "repositories", "under"]


def under(path: str, parents: list[str]) -> bool:
    """Whether ``path`` is one of ``parents`` or inside one (plain string paths, resolved)."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


MAX_WALK_DIRS = 20_000
"""Folders of the workspace looked through for nested repositories when the sandbox starts."""
_MAX_UNWALKED = 256  # folders a cut walk binds read-only; more are merged into their parents
GIT_NAME = ".git"
_MARKS = frozenset({"HEAD", "objects", "refs", "commondir", "config"})  # what git's test looks at


# -- git control data, at write time (the file tools) ------------------------------------------


def _entry(dir_fd: int, name: str, adding: str | None, want_dir: bool) -> bool:
    """Whether ``name`` is in ``dir_fd`` (or is ``adding``): for ``objects`` and ``refs``, what
    git's own test asks, ``access(X_OK)`` (a folder, a symlink to one, an executable file: issue
    40's F8), else anything but a folder (a symlinked ``HEAD`` too)."""
    if name == adding:
        return True
    if want_dir:
        try:
            return os.access(name, os.X_OK, dir_fd=dir_fd)
        except OSError:
            return False
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=want_dir)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) == want_dir


def git_dir_at(dir_fd: int, adding: str | None = None) -> bool:
    """Whether the open directory ``dir_fd`` is a git directory by git's own test
    (``is_git_directory`` in git's setup.c: ``HEAD`` and either ``objects/`` and ``refs/``, or a
    ``commondir`` file) or a common directory a ``commondir`` file may name (``config``,
    ``objects/`` and ``refs/``, with or without ``HEAD``), or becomes one once an entry named
    ``adding`` is made in it. ``objects`` and ``refs`` count when git's ``access(X_OK)`` passes
    (an executable file too)."""
    tree = _entry(dir_fd, "objects", adding, True) and _entry(dir_fd, "refs", adding, True)
    if _entry(dir_fd, "HEAD", adding, False):
        return tree or _entry(dir_fd, "commondir", adding, False)
    return tree and _entry(dir_fd, "config", adding, False)


def check_git_write(dir_fd: int, name: str | None, path: str, *, creating: bool = False) -> None:
    """Refuse a write that reaches git control data: call it for each component of a write's
    walk, with the directory it lies in (``name`` None: for ``dir_fd`` itself, once it is
    entered). ``creating``: ``name`` does not exist yet (a folder or file the write makes).

    Raises:
        ToolError: ``name`` is ``.git`` (any case: a folder, or a ``gitdir:`` file that would name
            a planted repository), ``dir_fd`` is a git directory, or making ``name`` would turn it
            into one (``path``: as the tool was given it).
    """
    if name is None:
        if git_dir_at(dir_fd):
            raise ToolError(kept_write(path, "inside a git directory (git control data)").message)
        return
    if name.casefold() == GIT_NAME:
        raise ToolError(kept_write(path, "git control data (a .git folder or file)").message)
    if creating and name in _MARKS and git_dir_at(dir_fd, adding=name):
        raise ToolError(kept_write(path, "what would make its folder a git directory (git control data)").message)


# -- the walk for the sandbox --------------------------------------------------------------------


def git_pointer(path: str, name: str, base: str) -> str | None:
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


@dataclass
class KeptPaths:
    """What :func:`kept_paths` found.

    Attributes:
        paths: absolute paths in the workspace to keep read-only (each ``.git`` folder or file,
            the git directories they name and their ``commondir``, gitlink folders without a
            ``.git``, and the folders a cut walk did not look through).
        links: each ``.git`` that is a symlink -> what it reads (no bind mount keeps a symlink:
            ``_git_links`` restores it).
        notes: what could not be looked at, in words (a cut walk, an index not read); empty when
            the walk saw everything.
        repos: each repository the walk found -> ``(st_dev, st_ino)`` of its entry (not
            followed): a ``.git`` folder, file or symlink, or a folder that is a git directory by
            git's own test whatever its name (a bare ``origin.git``, a ``src/`` with
            ``core.worktree``), kept read-only whole.
        gitlink_folders: the folder of every gitlink the walk's repositories' indexes hold
            (existing or not): a repository there runs at the holding repository's ``git status``.
        pinned: the gitlink folders that hold a ``.git`` (a checked-out submodule): the sandbox
            makes each (and the folders above it) a mount point, so it cannot be renamed away and
            replaced by a planted repository (``mv sm sm.old; git init sm``), its files writable.
    """

    paths: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    repos: dict[str, tuple[int, int]] = field(default_factory=dict)
    gitlink_folders: set[str] = field(default_factory=set)
    pinned: list[str] = field(default_factory=list)


def _is_git_dir(path: str) -> bool:
    """:func:`git_dir_at` for the folder ``path`` (never through a symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return git_dir_at(fd)
    finally:
        os.close(fd)


def _note_repo(out: KeptPaths, path: str) -> None:
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        out.repos[path] = (st.st_dev, st.st_ino)


def _merge(folders: list[str], root: str) -> list[str]:
    """``folders`` made at most :data:`_MAX_UNWALKED` mounts: their parents taken instead (more
    is kept read-only, never less), never ``root`` itself."""
    while len(folders) > _MAX_UNWALKED:
        merged = list(dict.fromkeys(p if os.path.dirname(p) == root else os.path.dirname(p) for p in folders))
        if merged == folders:  # all are the root's own folders: as many mounts as they are
            break
        folders = merged
    return [p for p in folders if not any(q != p and under(p, [q]) for q in folders)]


def kept_paths(root: str, max_dirs: int = MAX_WALK_DIRS) -> KeptPaths:
    """The git control data in the workspace ``root`` that the sandbox keeps read-only (see the
    module docstring), found by a walk of at most ``max_dirs`` folders that never follows a
    symlink (but a symlinked ``.git``'s target). A walk cut by ``max_dirs`` (above 1) keeps the
    folders it did not reach read-only (their parents, past :data:`_MAX_UNWALKED` of them) and
    says so in ``notes``; ``max_dirs=1`` looks at ``root``'s own repository only (an allowed
    write folder's), nothing below it."""
    out = KeptPaths()
    found: list[str] = []
    stack, seen = [root], 0
    repos: list[tuple[str, str]] = []  # (work tree, git directory)
    unread: list[str] = []  # the user's folders that could not be listed (chmod 000): a command may chmod them
    while stack and seen < max_dirs:
        here = stack.pop()
        seen += 1
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            with contextlib.suppress(OSError):
                if os.lstat(here).st_uid == os.geteuid():  # another user's: no command of this run lists it
                    unread.append(here)
            continue
        names = {e.name for e in entries}
        if here != root and ({"objects", "refs"} <= names or {"HEAD", "commondir"} <= names) and _is_git_dir(here):
            # a git directory not named .git (a bare repository): kept whole, not walked into
            found.append(here)
            _note_repo(out, here)
            continue
        for entry in entries:
            if entry.name != GIT_NAME:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                continue
            gitdirs = []
            _note_repo(out, entry.path)
            if entry.is_symlink():
                gitdirs.append(os.path.realpath(entry.path))
                with contextlib.suppress(OSError):
                    out.links[entry.path] = os.readlink(entry.path)
            elif entry.is_dir():
                found.append(entry.path)
                gitdirs.append(entry.path)
            else:
                found.append(entry.path)
                target = git_pointer(entry.path, "", here)
                gitdirs += [target] if target else []
            for gitdir in gitdirs:
                common = git_pointer(gitdir, "commondir", gitdir)
                found += [gitdir, *([common] if common else [])]
                repos.append((here, gitdir))
    for top, gitdir in repos:  # a repository planted in a gitlink's empty folder runs at the top's git status
        links = gitlinks(gitdir)
        if isinstance(links, str):
            out.notes.append(f"the gitlinks of {os.path.relpath(top, root)} are not known ({links}); a repository "
                             "made in a submodule's empty folder there is not kept from commands")
            continue
        for rel in links:
            folder = os.path.join(top, rel)
            out.gitlink_folders.add(folder)
            if os.path.isdir(folder) and not os.path.islink(folder) and os.path.lexists(os.path.join(folder,
                                                                                                     GIT_NAME)):
                out.pinned.append(os.path.realpath(folder))
            if os.path.isdir(folder) and not os.path.islink(folder) and not os.path.lexists(
                    os.path.join(folder, GIT_NAME)):
                found.append(os.path.realpath(folder))
    unread = [p for p in unread if p != root]
    if unread:
        found += unread
        shown = ", ".join(os.path.relpath(p, root) for p in unread[:5]) + (", ..." if len(unread) > 5 else "")
        out.notes.append(f"{len(unread)} folders of the workspace could not be looked through for nested "
                         f"repositories; they are read-only for commands: {shown}")
    if stack and max_dirs > 1:
        unwalked = _merge(sorted(stack), root)
        found += unwalked
        shown = ", ".join(os.path.relpath(p, root) for p in unwalked[:5]) + (", ..." if len(unwalked) > 5 else "")
        out.notes.append(f"the workspace has more than {max_dirs} folders; the {len(unwalked)} folders not looked "
                         f"through for nested repositories are read-only for commands: {shown}")
    out.paths = [p for p in dict.fromkeys(found) if under(p, [root]) and p != root and os.path.lexists(p)]
    return out


def kept_read_only(root: str, max_dirs: int = MAX_WALK_DIRS, links: dict[str, str] | None = None,
                   pinned: list[str] | None = None) -> list[str]:
    """:func:`kept_paths`'s ``paths`` (``links`` gets its ``links``, ``pinned`` its ``pinned``);
    each of its ``notes`` is given as a :class:`RuntimeWarning` (a cut walk is never silent)."""
    kept = kept_paths(root, max_dirs)
    if links is not None:
        links.update(kept.links)
    if pinned is not None:
        pinned += [p for p in kept.pinned if under(p, [root]) and p != root]
    for note in kept.notes:
        warnings.warn(f"kimik3: {note}", RuntimeWarning, stacklevel=2)
    return kept.paths


def repositories(kept: KeptPaths) -> dict[str, tuple[int, int]]:
    """The repositories ``kept``'s walk found (:attr:`KeptPaths.repos`)."""
    return dict(kept.repos)


# -- kimik3's own records ------------------------------------------------------------------------


class SessionFiles:
    """kimik3's record of the run and the other folders it acts on later: the session file and
    its sub-agents' sessions beside it (``<stem>.task-*.jsonl`` in the session's directory, also
    ones made later in the run; see :mod:`kimik3.harness._tasks`), and the folders given to
    :meth:`keep` (the checkpoint store, the workspace's skills). The file tools refuse to read or
    write the session files (a forged record, an approval of a deferred call, would be acted on by
    the next resume) and to write in the kept folders; the sandbox binds the existing ones
    read-only. Set by the run's hooks (:class:`kimik3.harness.SandboxHooks`, the checkpoints) at
    the run's start; a session writer's lock is an ``flock`` on the file itself (no lock file).

    Attributes:
        path: the run's session file, resolved; None: the run records no session.
        folders: each kept folder (resolved) -> what it is, in words ("kimik3's checkpoint store").
        links: each symlink on the way to a kept folder (absolute) -> what it read when kept: a
            bind mount keeps the folder, not the symlink naming it, so the sandbox restores one a
            command re-points (``ln -sfn evil .agents``: a later run would read ``evil/skills``),
            as a ``.git`` symlink (``_git_links``).
    """

    def __init__(self) -> None:
        self.path: str | None = None
        self.folders: dict[str, str] = {}
        self.links: dict[str, str] = {}

    def set(self, path: str | os.PathLike[str] | None) -> None:
        """Make ``path`` (None: none) the run's session file."""
        self.path = os.path.realpath(os.fspath(path)) if path is not None else None

    def keep(self, folder: str | os.PathLike[str], what: str) -> None:
        """Keep ``folder`` (existing or not; resolved) from every tool's writes from now on
        (the sandbox: from its next start); ``what`` names it in the refusal ("kimik3's
        checkpoint store"); each symlink on the way to it goes to :attr:`links`."""
        here = "/"
        for part in os.path.abspath(os.fspath(folder)).split("/")[1:]:
            here = os.path.join(here, part)
            try:
                self.links[here] = os.readlink(here)
            except OSError:  # not a symlink, or missing
                continue
            here = os.path.realpath(here)
        self.folders[os.path.realpath(os.fspath(folder))] = what

    def _named(self, name: str) -> bool:
        assert self.path is not None
        base = os.path.basename(self.path)
        stem = Path(base).stem
        return name == base or (name.startswith(f"{stem}.task-") and name.endswith(".jsonl"))

    def existing(self) -> list[str]:
        """The session file, its sub-agents' sessions and the kept folders (or files: git's
        global configuration) that exist now (resolved paths)."""
        folders = [p for p in self.folders if (os.path.isdir(p) or os.path.isfile(p)) and not os.path.islink(p)]
        if self.path is None:
            return folders
        folder = os.path.dirname(self.path)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return folders
        return [os.path.join(folder, n) for n in names if self._named(n)] + folders

    def check_write(self, where: str, path: str) -> None:
        """Refuse a write at the absolute, symlink-free ``where`` (a file, or a folder made)
        inside a kept folder or naming one.

        Raises:
            ToolError: it is (in) a kept folder (``path``: as the tool was given it).
        """
        for folder, what in self.folders.items():
            if under(where, [folder]):
                raise ToolError(kept_write(path, what).message)

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
                if p in self.folders:
                    continue
                try:
                    other = os.stat(p, follow_symlinks=False)
                except OSError:
                    continue
                hit = hit or (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
        if hit:
            raise ToolError(f"{path} is kimik3's record of this run (its session file or a sub-agent's); the file "
                            "tools do not read or write it")
