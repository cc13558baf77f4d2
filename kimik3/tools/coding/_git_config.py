"""What a repository's git configuration names in the workspace (issue 40): the files git reads
and the programs git runs because a config says so (``include.path``, ``core.hooksPath``, a
filter's ``clean``, ``core.fsmonitor``, hooks). :func:`config_named` gives the paths the sandbox
keeps read-only when it starts; :func:`made_repositories` says, at the run's end, which
repositories a command made that name programs (:func:`programs_named`). Config files are read
plainly (enough to name what a repository would run, not a full parser), at most 1 MiB, never
through a symlink. The repositories are those of the sandbox's walk (:func:`~._kept.kept_paths`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence

from ._kept import GIT_NAME, MAX_WALK_DIRS, git_pointer, kept_paths, repositories, under

__all__ = ["config_named", "made_repositories", "programs_named"]

_PROGRAM_KEYS = ("core.fsmonitor", "core.hookspath", "core.sshcommand", "core.pager", "core.editor",
                 "core.askpass", "core.gitproxy", "sequence.editor", "diff.external", "credential.helper",
                 "gpg.program", "include.path")
_PROGRAM_SUFFIXES = (".clean", ".smudge", ".process", ".textconv", ".command", ".helper", ".sshcommand",
                     ".driver", ".cmd", ".uploadpack", ".receivepack", ".difffilter", ".update")
"""A merge driver, a merge/diff tool's or a trailer's ``cmd``, a remote's ``uploadpack``, ..."""
_PROGRAM_PREFIXES = ("alias.", "pager.")  # values git runs: "!./x.sh", a pager per command
_MAX_CONFIG_BYTES = 1 << 20


def _is_program(key: str) -> bool:
    """Whether git runs the value of the config key ``key`` (``section[.sub].key``, lower case)."""
    bare = key.split(".", 1)[0] + "." + key.rsplit(".", 1)[-1]
    return bare in _PROGRAM_KEYS or key.endswith(_PROGRAM_SUFFIXES) or key.startswith(_PROGRAM_PREFIXES)


def _continues(value: str) -> bool:
    """Whether a config value goes on at the next line: it ends in an escaping backslash, not
    inside a ``#`` / ``;`` comment (outside quotes)."""
    quoted, i = False, 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 == len(value):
                return True
            i += 1
        elif value[i] == '"':
            quoted = not quoted
        elif value[i] in "#;" and not quoted:
            return False
        i += 1
    return False


def _git_lines(text: str) -> list[str]:
    """A config file's lines as git reads them, stripped: a leading UTF-8 BOM skipped, broken at
    ``\n`` only (a form feed or U+2028 in a value breaks none), a value whose line ends in a
    backslash joined with the next line (``comment = x\\`` then ``[user]`` is one value)."""
    out, carry = [], ""
    for raw in text.removeprefix("\ufeff").split("\n"):
        line = carry + raw.removesuffix("\r")
        rest = line.strip()
        rest = rest.split("]", 1)[1].strip() if rest.startswith("[") and "]" in rest else rest
        value = rest.partition("=")[2] if "=" in rest and not rest.startswith(("#", ";")) else ""
        carry = line[:-1] if _continues(value) else ""
        if not carry:
            out.append(line.strip())
    return [*out, carry.strip()] if carry else out


def _config_pairs(text: str) -> list[tuple[str, str]]:
    """``(section[.sub].key, value)`` set in a git config file's text, quotes taken off the value
    (a plain reading: enough to name what a repository would run, not a full parser)."""
    out, section = [], ""
    for line in _git_lines(text):
        if line.startswith("["):
            head = line[1:].split("]", 1)[0].strip()
            name, _, sub = head.partition(" ")
            section = name.lower() + (f".{sub.strip().strip(chr(34))}" if sub else "")
            line = line.split("]", 1)[1].strip() if "]" in line else ""
        if line and not line.startswith(("#", ";")) and section:
            key, _, value = line.partition("=")
            out.append((f"{section}.{key.strip().lower()}", value.strip().strip('"')))
    return out


def _config_values(path: str) -> list[tuple[str, str]]:
    """``(section[.sub].key, value)`` of a git config file (:func:`_config_pairs`); at most 1 MiB,
    never through a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        text = os.fsdecode(f.read(_MAX_CONFIG_BYTES)) if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    return _config_pairs(text)


def _git_configs(gitdir: str) -> tuple[list[str], str]:
    """The config files git reads for the git directory ``gitdir`` and the directory its hooks
    are in: the ``config`` of its common directory (``commondir``: a linked worktree's is the main
    repository's) and its own ``config.worktree`` (``extensions.worktreeConfig``)."""
    common = git_pointer(gitdir, "commondir", gitdir) or gitdir
    return [os.path.join(common, "config"), os.path.join(gitdir, "config.worktree")], common


def _linked(gitdir: str, common: str) -> list[str]:
    """The real paths of the symlinks in the git directory ``gitdir`` and its common directory
    (their entries and those of ``hooks/`` and ``info/``): git follows them, so the target of
    ``.git/hooks -> ../githooks`` or ``.git/config -> ../repo-config`` is git's data."""
    out = []
    for folder in {gitdir, common, *(os.path.join(d, n) for d in (gitdir, common) for n in ("hooks", "info"))}:
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            out += [os.path.realpath(e.path) for e in entries if e.is_symlink()]
    return out


def _enclosing(root: str) -> list[str]:
    """The ``.git`` of the repository the workspace ``root`` lies in (the first folder above it
    that has one: a workspace ``repo/frontend`` whose ``repo`` sets ``core.hooksPath
    frontend/.husky``), or none."""
    here = os.path.realpath(root)
    while here != os.path.dirname(here):
        here = os.path.dirname(here)
        if os.path.lexists(os.path.join(here, GIT_NAME)):
            return [os.path.join(here, GIT_NAME)]
    return []


_PATH_KEYS = ("include.path", "core.hookspath", "core.attributesfile")  # and includeif.<cond>.path


def config_named(root: str, max_dirs: int = MAX_WALK_DIRS, global_configs: Sequence[str] = ()) -> list[str]:
    """The paths in the workspace ``root`` that its repositories' configs and the config of the
    repository it lies in (:func:`_enclosing`) (the common directory's
    ``config``: a linked worktree's is the main repository's; and ``config.worktree``) name as
    files git reads or runs (issue 40): ``include.path`` / ``includeIf.<cond>.path`` (resolved from the config's
    folder, followed to a depth of 4), ``core.hooksPath`` and ``core.attributesFile`` (from the
    work tree's top), and the program of a command setting (:data:`_PROGRAM_KEYS`, a filter's
    ``clean``...) when it is a path (``./scripts/x.sh``). A ``.githooks`` folder or a shared
    ``.gitconfig`` is the model's to write otherwise, and git runs what it names. Also what the
    user's ``global_configs`` (files, or folders holding a ``config``) name: ``-w $HOME`` with
    ``[include] path = ~/.gitconfig.local`` in ``~/.gitconfig``. And where a symlink in a git
    directory leads (:func:`_linked`). Resolved; sorted."""
    found: set[str] = set()
    real_root = os.path.realpath(root)
    starts = [([os.path.join(c, "config") if os.path.isdir(c) else c], root) for c in global_configs]
    for entry in [*_enclosing(root), *repositories(kept_paths(root, max_dirs))]:
        gitdir = os.path.realpath(entry) if os.path.isdir(entry) else git_pointer(entry, "", os.path.dirname(entry))
        if gitdir is not None:
            configs, common = _git_configs(gitdir)
            starts.append(([os.path.realpath(c) for c in configs], os.path.dirname(entry)))
            found.update(p for p in _linked(gitdir, common) if under(p, [real_root]) and p != real_root)
    for configs, top in starts:
        seen = 0
        while configs and seen < 6:
            config, seen = configs.pop(), seen + 1
            for key, value in _config_values(config):
                if not value:
                    continue
                bare = key.split(".", 1)[0] + "." + key.rsplit(".", 1)[-1]
                if bare == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
                    path = os.path.join(os.path.dirname(config), os.path.expanduser(value))
                    configs.append(path)
                elif bare in _PATH_KEYS:
                    path = os.path.join(top, os.path.expanduser(value))
                elif _is_program(key) and "/" in value.split()[0]:
                    path = os.path.join(top, os.path.expanduser(value.split()[0].removeprefix("!")))  # a shell one
                else:
                    continue
                real = os.path.realpath(path)
                if under(real, [real_root]) and real != real_root:
                    found.add(real)
    return sorted(found)


def programs_named(gitdir: str) -> list[str]:
    """What in the git directory ``gitdir`` names a program git would run there: config keys
    (``core.fsmonitor``, a filter's ``clean``, ``include.path``, ...) of its common directory's
    ``config`` and its ``config.worktree``, and hooks that are not git's ``.sample`` files; sorted.
    Read without following a symlink, at most 1 MiB of each config: a config that is a symlink or
    larger is itself named (``config: a symlink, not read``)."""
    found: set[str] = set()
    configs, common = _git_configs(gitdir)
    for config in configs:  # git reads it whole, and through a symlink: what it says is not known here
        with contextlib.suppress(OSError):
            info = os.lstat(config)
            if stat.S_ISLNK(info.st_mode) or info.st_size > _MAX_CONFIG_BYTES:
                why = "a symlink" if stat.S_ISLNK(info.st_mode) else "over 1 MiB"
                found.add(f"{os.path.basename(config)}: {why}, not read")
    for key, _ in (pair for config in configs for pair in _config_values(config)):
        if _is_program(key) or key.startswith("includeif."):
            found.add(key)
    with contextlib.suppress(OSError):
        found.update(f"hooks/{n}" for n in os.listdir(os.path.join(common, "hooks")) if not n.endswith(".sample"))
    return sorted(found)


def made_repositories(root: str, before: Mapping[str, tuple[int, int]], max_dirs: int = MAX_WALK_DIRS) -> list[str]:
    """A line for each repository in ``root`` now (a walk as :func:`kept_paths`'s) that was not
    in ``before`` (:func:`repositories` of an earlier walk): a command of the run made it, the
    sandbox could not keep it. Said when its git directory names a program
    (:func:`programs_named`: git run inside it runs it), and always when it *replaced* one found
    at the start (the same path, another file: ``mv sm sm.old; git init sm`` in a submodule's
    folder), since the enclosing repository's own ``git status`` enters a submodule's folder and
    runs what the new one names (issue 40). Empty when there is none."""
    lines = []
    now = kept_paths(root, max_dirs)
    for entry, ident in sorted(repositories(now).items()):
        if before.get(entry) == ident:
            continue
        bare = os.path.basename(entry) != GIT_NAME
        gitdir = (os.path.realpath(entry) if os.path.isdir(entry)
                  else git_pointer(entry, "", os.path.dirname(entry)))
        named = programs_named(gitdir) if gitdir else []
        shown = ", ".join(named[:6]) + (", ..." if len(named) > 6 else "")
        where = os.path.relpath(entry if bare else os.path.dirname(entry), root)
        if entry in before:
            lines.append(f"a command replaced the repository {where} during the run (its {os.path.basename(entry)} is "
                         f"not the one found at the start){f' and it names programs ({shown})' if named else ''}; "
                         "git status in the repository that holds it as a submodule enters it and runs what it "
                         "names, as git run inside it does: look before you run git in this workspace")
        elif named and os.path.dirname(entry) in now.gitlink_folders:
            lines.append(f"a command made the repository {where} during the run in a submodule's folder and it names "
                         f"programs ({shown}); git status in the repository that holds the submodule runs them: look "
                         "before you run git in this workspace")
        elif named:
            kind = "git directory" if bare else "repository"
            lines.append(f"a command made the {kind} {where} during the run and it names programs ({shown}); git "
                         "run inside it (or a git status of a repository holding it as a submodule) runs them: look "
                         "before you do")
    return lines
