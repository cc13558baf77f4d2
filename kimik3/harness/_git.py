"""Git on a workspace's repository without running anything the repository names.

A repository's configuration, hooks and attributes name programs git runs: a filter driver
(``filter.<name>.clean`` / ``smudge`` / ``process``, chosen by ``.gitattributes`` or
``.git/info/attributes``, defined in ``.git/config`` or a file it includes), hooks
(``.git/hooks/*``, ``core.hooksPath``: ``post-index-change`` runs on ``git add``,
``reference-transaction`` on ``git update-ref``), ``core.fsmonitor``, a promisor remote's
``remote.<name>.uploadpack`` or ``core.sshCommand`` (a partial clone fetches a missing object
lazily), ``diff.external`` and textconv drivers, signing and pager programs. Git's own SECURITY
section (git(1)) says it is not safe to run git in a ``.git`` directory that comes from an
untrusted source, and gitsecurityboundary(7) that such a repository is to be used only through a
sanitized clone. A workspace's repository is the model's to write: the sandbox keeps the top
``.git/config`` and ``.git/hooks`` read-only, but a repository made by ``git init`` in a
subfolder, a nested one, a submodule's, ``.git/info/attributes`` or a file an ``include.path``
names are not. What kimik3's own git runs there runs outside the sandbox.

So kimik3 runs git on a workspace's repository the sanitized way, without the repository's
configuration (:class:`Isolated`): ``GIT_DIR`` is a private git directory kimik3 writes (its
``config`` holds only the repository's object format and the settings that change what a snapshot
records, read as data; its ``info/exclude`` a copy of the repository's), ``GIT_WORK_TREE`` the work
tree and ``GIT_OBJECT_DIRECTORY`` the repository's objects. The repository's config, what it
includes, its hooks, ``info/attributes``, grafts, replace refs and promisor remotes are never read,
so nothing they name exists for git. Only two things act on the repository itself: finding it
(``rev-parse``, reading the settings) and keeping a snapshot alive (``update-ref``); for those git
reads the repository's configuration, and the only programs it could start there, hooks, are off.

Every command also runs with a clean environment (no ``GIT_*`` variable of kimik3's own process
but the user's choice of config files: ``GIT_CONFIG_GLOBAL``, ``GIT_CONFIG_SYSTEM``,
``GIT_CONFIG_NOSYSTEM``), no transport at all (``GIT_ALLOW_PROTOCOL`` empty, ``GIT_NO_LAZY_FETCH``:
no fetch, ssh or remote helper), no terminal prompt, stdin from ``/dev/null``, no pager, and
:data:`SAFE_CONFIG` over the user's own configuration too (hooks, fsmonitor, automatic maintenance
off), within :data:`GIT_TIMEOUT_S`. The user's global and system configuration are the user's own:
still read, so a filter installed there (Git LFS) applies as before, with its store the
repository's own (``lfs.storage``), except where it lies in the workspace (``-w $HOME``: the model
could have written it; then none is read). kimik3's git never writes through a symlink: a
repository whose ``.git``, ``objects/``, fan-out folders, ``refs/`` or ``refs/kimik3/...`` is one
is not written (:func:`unsafe_store`; issue 40).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import CheckpointError

__all__ = ["GIT_TIMEOUT_S", "SAFE_CONFIG", "Isolated", "Repository", "clean_env", "find_repository", "git_command",
           "global_configs", "private_folder", "unsafe_store"]

GIT_TIMEOUT_S = 300.0
"""A git command of kimik3's that runs longer is ended (a FIFO where a config file should be)."""
SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
               "-c", "commit.gpgSign=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
               "-c", "submodule.recurse=false", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
               "-c", "core.quotepath=false", "-c", "core.sparseCheckout=false", "-c", "index.sparse=false",
               "-c", "core.logAllRefUpdates=false")
"""``-c`` settings of every command: nothing it may start (hooks, an fsmonitor daemon, automatic
maintenance, a signing program, commands in submodules), bytes kept exactly (no CRLF conversion of
kimik3's own), a sparse checkout recorded as the files on disk are, no reflog of kimik3's refs."""
_KEPT_GIT_VARIABLES = frozenset({"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"})
_BOOLEAN_SETTINGS = ("core.filemode", "core.symlinks", "core.ignorecase", "core.precomposeunicode")
_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0", ""})
_MAX_EXCLUDE_BYTES = 1 << 20


def clean_env(*, network: bool = False) -> dict[str, str]:
    """kimik3's environment without its ``GIT_*`` variables (but the user's choice of config
    files), no terminal prompt, no pager; without ``network``, no transport (``file`` and local
    paths included: a promisor remote is never asked for an object)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEPT_GIT_VARIABLES}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat")
    if not network:
        env.update(GIT_ALLOW_PROTOCOL="", GIT_NO_LAZY_FETCH="1")
    return env


def global_configs() -> list[Path]:
    """The user's global git configuration git reads (git-config(1) FILES): the file
    ``GIT_CONFIG_GLOBAL`` names, else ``~/.gitconfig`` and ``${XDG_CONFIG_HOME:-~/.config}/git``
    (its ``config``, and the ``attributes`` and ``ignore`` files beside it). A workspace that holds
    one (``-w $HOME``) lets the model write what git runs (a filter's ``clean``; issue 40)."""
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    if named:
        return [Path(named)]
    home = Path(os.path.expanduser("~"))
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return [home / ".gitconfig", Path(xdg) / "git"]


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (resolved, also when it does not exist yet) lies in ``folder``'s real path."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def git_command(cwd: Path, args: tuple[str, ...], env: dict[str, str], data: bytes | None = None,
                timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git --no-pager <SAFE_CONFIG> <args>`` in ``cwd`` with ``env`` (stdin ``data`` or
    ``/dev/null``).

    Raises:
        CheckpointError: git cannot run, or ran past ``timeout`` seconds (default
            :data:`GIT_TIMEOUT_S`; it is ended).
    """
    timeout = GIT_TIMEOUT_S if timeout is None else timeout
    try:
        return subprocess.run(["git", "--no-pager", *SAFE_CONFIG, *args], cwd=cwd, input=data, capture_output=True,
                              stdin=None if data is not None else subprocess.DEVNULL, env=env, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise CheckpointError(f"git {args[0]} took more than {timeout:g} s in {cwd}") from None
    except OSError as e:
        raise CheckpointError(f"cannot run git: {e}") from e


_WRITTEN = ("objects", "refs", "refs/kimik3")
"""The folders of a common directory kimik3's git writes (objects, ``refs/kimik3/...``)."""
_MAX_WALK = 10_000


def unsafe_store(common: Path) -> str | None:
    """Why kimik3's git may not write the repository whose common directory is ``common``, or None.

    kimik3's git writes objects into ``objects/`` (and its fan-out folders ``objects/xx``,
    ``pack``) and refs under ``refs/kimik3/``. A repository is the model's to write: any of those
    folders made a symlink (``ln -s /elsewhere .git/objects``) would make kimik3's own git write
    outside the workspace, outside the sandbox (issue 40). So none of them, nor anything under
    ``refs/kimik3``, may be a symlink or anything but a folder (``lstat``, never followed). Checked
    when git checkpoints start and before each snapshot; a process running during the snapshot
    could still swap a folder (a race this does not close).

    Args:
        common: the common directory (resolved, as :attr:`Repository.common`).
    """
    for sub in _WRITTEN:
        try:
            st = os.lstat(common / sub)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{common / sub} cannot be read ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{common / sub} is a symlink or not a folder"
    seen = 0
    for top in (common / "objects", common / "refs" / "kimik3"):
        stack = [top]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        seen += 1
                        if entry.is_symlink():
                            return f"{entry.path} is a symlink"
                        if top.name == "kimik3" and entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        if seen > _MAX_WALK:
                            return f"{top} holds more than {_MAX_WALK} entries"
            except FileNotFoundError:
                continue
            except OSError as e:
                return f"{top} cannot be read ({e.strerror})"
    return None


def _output(proc: subprocess.CompletedProcess[bytes], what: str) -> bytes:
    if proc.returncode != 0:
        raise CheckpointError(f"git {what} failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
    return proc.stdout


@dataclass(frozen=True)
class Repository:
    """Where a work tree's repository is.

    Attributes:
        top: the top of the work tree.
        gitdir: its git directory (a linked worktree's own, a submodule's under ``.git/modules``).
        common: the directory of its objects, refs and ``info/exclude`` (``gitdir`` but for a
            linked worktree).
    """

    top: Path
    gitdir: Path
    common: Path

    def env(self) -> dict[str, str]:
        """:func:`clean_env` naming this repository's git directory (no discovery)."""
        return {**clean_env(), "GIT_DIR": str(self.gitdir)}


def find_repository(root: Path) -> Repository | None:
    """The repository whose work tree holds ``root``, or None (not in a work tree: no
    repository, a bare one, inside ``.git``; no git; a repository git refuses, such as one owned by
    another user)."""
    if shutil.which("git") is None:
        return None
    try:
        out = _output(git_command(root, ("rev-parse", "--is-inside-work-tree", "--absolute-git-dir",
                                         "--show-toplevel", "--git-common-dir"), clean_env()), "rev-parse")
        inside, gitdir, top, common = os.fsdecode(out).splitlines()
    except (CheckpointError, ValueError):
        return None
    if inside != "true":
        return None
    return Repository(Path(top), Path(gitdir), (root / common).resolve())


def _settings(repo: Repository, env: dict[str, str]) -> list[str]:
    """The lines of the private ``config``: the repository's object format and the settings of
    :data:`_BOOLEAN_SETTINGS` (values checked: only booleans, only ``sha1`` / ``sha256``)."""
    keys = "|".join(k.replace(".", r"\.") for k in (*_BOOLEAN_SETTINGS, "extensions.objectformat"))
    proc = git_command(repo.top, ("config", "-z", "--get-regexp", f"^({keys})$"), env)
    found: dict[str, str] = {}
    for item in proc.stdout.split(b"\0") if proc.returncode == 0 else ():
        key, _, value = os.fsdecode(item).partition("\n")
        found[key.lower()] = value.strip().lower()
    lines = ["[core]", "\tbare = false"]
    lines += [f"\t{k.split('.')[1]} = {'true' if found[k] in _TRUE else 'false'}" for k in _BOOLEAN_SETTINGS
              if found.get(k) is not None and found[k] in _TRUE | _FALSE]  # fmt: skip
    objects = found.get("extensions.objectformat")
    if objects not in (None, "sha1", "sha256"):
        raise CheckpointError(f"the repository of {repo.top} has an object format git checkpoints do not know "
                              f"({objects!r:.40})")
    lines += ["\trepositoryformatversion = 1", "[extensions]", f"\tobjectformat = {objects}"] if objects else [
        "\trepositoryformatversion = 0"]
    lfs = str(repo.common / "lfs").replace("\\", "\\\\").replace('"', '\\"')
    return [*lines, "[lfs]", f'\tstorage = "{lfs}"']


def _copy_exclude(src: Path, dst: Path) -> None:
    """Copy the repository's ``info/exclude`` (a regular file, at most 1 MiB, never through a
    symlink or a FIFO)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            dst.write_bytes(f.read(_MAX_EXCLUDE_BYTES))


class Isolated:
    """Git on ``repo``'s work tree and objects through a private git directory (see the module
    docstring): the repository's configuration, hooks and attributes files are never read.

    Args:
        repo: the repository.
        folder: an empty directory of kimik3's own for the private git directory (removed by the
            caller).
        workspace: the model's workspace: where the user's global git configuration
            (:func:`global_configs`) lies in it, git reads none (``GIT_CONFIG_GLOBAL=/dev/null``:
            a filter the model wrote there never runs in kimik3's git; issue 40).

    Attributes:
        env: the environment of its commands (add ``GIT_INDEX_FILE`` for a private index).
        repo_env: the environment of the commands on the repository itself (its settings, its
            refs): ``GIT_DIR`` a private directory whose ``commondir`` is ``repo.common``.

    Raises:
        CheckpointError: the repository's object format is unknown, or its store is not kimik3's
            to write (:meth:`check`).
    """

    def __init__(self, repo: Repository, folder: Path, workspace: Path | None = None) -> None:
        self.repo = repo
        self.check()
        # the user's global config where the model could have written it (-w $HOME): not read
        untrusted = workspace is not None and any(_inside(p, workspace) for p in global_configs())
        no_global = {"GIT_CONFIG_GLOBAL": "/dev/null"} if untrusted else {}
        # The repository itself, for its settings and refs, through a git directory of kimik3's own
        # whose ``commondir`` names the common directory found at the start: a ``.git`` file or a
        # ``commondir`` file rewritten in the workspace since is never followed (git's ref store
        # reads ``$GIT_DIR/commondir`` even where ``GIT_COMMON_DIR`` is set).
        pinned = folder / "repository"
        pinned.mkdir()
        (pinned / "commondir").write_bytes(os.fsencode(repo.common) + b"\n")
        (pinned / "HEAD").write_text("ref: refs/heads/kimik3\n", encoding="utf-8")
        self.repo_env = {**clean_env(), **no_global, "GIT_DIR": str(pinned)}
        shadow = folder / "git"
        for sub in ("objects", "refs", "info"):
            (shadow / sub).mkdir(parents=True)
        (shadow / "HEAD").write_text("ref: refs/heads/kimik3\n", encoding="utf-8")
        (shadow / "config").write_text("\n".join(_settings(repo, self.repo_env)) + "\n", encoding="utf-8")
        _copy_exclude(repo.common / "info" / "exclude", shadow / "info" / "exclude")
        self.env = {**clean_env(), **no_global, "GIT_DIR": str(shadow), "GIT_WORK_TREE": str(repo.top),
                    "GIT_OBJECT_DIRECTORY": str(repo.common / "objects")}

    def check(self) -> None:
        """Raise CheckpointError when the repository's store is not kimik3's to write: its ``.git``
        is a symlink (it may lead to any repository), or :func:`unsafe_store` says why."""
        dot_git = self.repo.top / ".git"
        why = f"{dot_git} is a symlink" if os.path.islink(dot_git) else unsafe_store(self.repo.common)
        if why is not None:
            raise CheckpointError(f"kimik3's git does not write this repository: {why}")

    def run(self, cwd: Path, *args: str, env: dict[str, str] | None = None,
            data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """``git <args>`` in ``cwd`` (inside the work tree), isolated; ``env`` adds to :attr:`env`."""
        return git_command(cwd, args, {**self.env, **(env or {})}, data)

    def git(self, cwd: Path, *args: str, env: dict[str, str] | None = None, data: bytes | None = None) -> bytes:
        """The output of :meth:`run`; CheckpointError (git's message) when it fails."""
        return _output(self.run(cwd, *args, env=env, data=data), args[0])

    def update_ref(self, ref: str, commit: str) -> None:
        """Point ``ref`` of the repository itself at ``commit`` (hooks off; :meth:`check` first)."""
        self.check()
        _output(git_command(self.repo.top, ("update-ref", ref, commit), self.repo_env), "update-ref")

    def create_ref(self, ref: str, commit: str) -> bool:
        """Create ``ref`` of the repository itself at ``commit`` (hooks off); False when it exists
        already (left as it is).

        Raises:
            CheckpointError: git failed otherwise (its message), or :meth:`check` did.
        """
        self.check()
        proc = git_command(self.repo.top, ("update-ref", "--stdin"), self.repo_env,
                           data=f"create {ref} {commit}\n".encode())
        if proc.returncode != 0 and b"already exists" in proc.stderr:
            return False
        _output(proc, "update-ref")
        return True


def private_folder() -> Path:
    """A new temporary directory for an :class:`Isolated` git directory and private indexes."""
    return Path(tempfile.mkdtemp(prefix="kimik3-git-"))
