"""Git snapshots of a work tree, the mechanism of git checkpoints (:mod:`._checkpoints` decides
which turns are recorded and writes the records; :mod:`._undo` restores from them).

A snapshot is a commit of the whole working tree under a root, untracked files included (ignored
ones only when a file tool names them), built in a private index (``GIT_INDEX_FILE``, seeded from
the repository's index for its stat cache: :func:`~._store.seed_index`) with ``git add -A``,
``write-tree`` and ``commit-tree``, and kept alive by a side ref; the user's index, HEAD, branches
and working tree are never touched. Skip-worktree bits are cleared in the private index, so a
sparse checkout is recorded as the files on disk are. Gitlinks are taken out before ``git add``
(it would run ``git status`` inside each one); a nested repository or submodule is fingerprinted
by a snapshot of its own (at most :data:`_MAX_NESTED_DEPTH` deep), never one whose work tree or
objects lie outside the workspace. Git runs isolated from the repository's configuration
(:class:`._git.Isolated`): no program the repository names runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .._exceptions import CheckpointError, ToolError
from ..tools.coding._api import Workspace
from ._git import Isolated, Repository, find_repository, private_folder
from ._store import not_hashed, seed_index

__all__ = ["GitSnapshots", "literal"]

_IDENTITY = {"GIT_AUTHOR_NAME": "kimik3", "GIT_AUTHOR_EMAIL": "kimik3@localhost",
             "GIT_COMMITTER_NAME": "kimik3", "GIT_COMMITTER_EMAIL": "kimik3@localhost"}
_NO_COMMIT = re.compile(r"error: '(.+)/' does not have a commit checked out")
_INVALID = re.compile(r"error: invalid path '(.+)'")  # a name git refuses (``.git /x``): left out, said
_MAX_NESTED_DEPTH = 4  # nested repositories inside nested repositories fingerprinted this deep
_MAX_SKIPPED = 64  # nested repositories without a commit excluded from one ``git add``


def literal(path: str) -> str:
    """A pathspec that means exactly ``path`` (no glob, no magic)."""
    return f":(literal){path}"


class GitSnapshots:
    """Snapshots of one work tree (or a part of it) in a private index, through git isolated from
    the repository's configuration (:class:`._git.Isolated`: no program the repository names runs).

    Args:
        root: the directory snapshotted (the workspace: a repository's top or a folder in it).
        repo: the repository (its index seeds the private one).
        ref_base: where :meth:`keep` puts refs (``refs/kimik3/<stamp>``).
        depth: how deep this repository is nested in the workspace's (0: the workspace's own).
        workspace: the workspace (``root`` by default; see :class:`._git.Isolated`).

    Raises:
        CheckpointError: git cannot run there.
    """

    def __init__(self, root: Path, repo: Repository, ref_base: str, depth: int = 0,
                 workspace: Path | None = None) -> None:
        self.root = root
        self.workspace = root if workspace is None else workspace
        self.ref_base = ref_base
        self.depth = depth
        self._tmp = private_folder()
        try:
            self._start(repo)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    def _start(self, repo: Repository) -> None:
        self.isolated = Isolated(repo, self._tmp, self.workspace)
        self.index = self._tmp / "index"
        seed_index(repo.gitdir / "index", self.index)
        self.env = {**_IDENTITY, "GIT_INDEX_FILE": str(self.index)}
        self.skipped: list[str] = []  # nested repositories without a commit (from the top): left out of ``add``
        self.not_hashed: dict[str, tuple[str, tuple[int, ...]]] = {}  # the last tree()'s, see _store.not_hashed
        self.refused: list[str] = []  # paths git refuses to add (from the top): left out of ``add``
        self.prefix = self.git("rev-parse", "--show-prefix").decode("utf-8", "surrogateescape").strip()
        self._nested: dict[str, GitSnapshots] = {}
        self._links: tuple[str, set[str]] | None = None  # (tree, its gitlinks), see gitlinks()
        if self.index.exists():  # the disk as it is: no skip-worktree entry (a sparse checkout)
            listed = self.run("ls-files", "-t", "-z", "--full-name")
            if listed.returncode != 0:  # a split index (its shared part is the repository's): no seed
                self.index.unlink()
                return
            sparse = b"".join(t[2:] + b"\0" for t in listed.stdout.split(b"\0") if t.startswith(b"S "))
            if sparse:
                self.git("update-index", "--no-skip-worktree", "-z", "--stdin", data=sparse)

    def run(self, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """``git <args>`` in :attr:`root` on the private index, isolated."""
        return self.isolated.run(self.root, *args, env=self.env, data=data)

    def git(self, *args: str, data: bytes | None = None) -> bytes:
        """The output of :meth:`run`; CheckpointError (git's message) when it fails."""
        return self.isolated.git(self.root, *args, env=self.env, data=data)

    def tree(self, named: Sequence[str] = ()) -> str:
        """The tree of the working tree under :attr:`root` (``add -A`` into the private index),
        with the files of ``named`` (workspace-relative paths the file tools name) even when
        ``.gitignore`` skips them. A nested repository without a commit (``git add`` refuses it)
        is left out and fingerprinted like the others (:meth:`nested_states`).

        Gitlinks (nested repositories, submodules) are taken out of the private index first:
        ``git add`` runs ``git status`` inside each one it holds (to see if it is dirty), with
        that repository's own configuration; a gitlink added anew records the repository's HEAD
        and runs nothing there."""
        self.isolated.check()  # no symlink out among the folders git writes (issue 40)
        staged = self.git("ls-files", "-s", "-z")
        links = b"".join(e.split(b"\t", 1)[1] + b"\0" for e in staged.split(b"\0") if e.startswith(b"160000 "))
        if links:
            self.git("update-index", "--force-remove", "-z", "--stdin", data=links)
        listed = self.git("ls-files", "-z", "-o", "--exclude-standard", "--full-name") + b"\0" + self.git(
            "diff-files", "-z", "--name-only") + b"\0" + b"\0".join(os.fsencode(self.prefix + p) for p in named)
        self.not_hashed = not_hashed(self.isolated.repo.top, listed)  # sparse, huge: never read by git add
        for _ in range(_MAX_SKIPPED):
            excludes = [f":(top,exclude,literal){p}" for p in [*self.skipped, *self.refused, *self.not_hashed]]
            proc = self.run("add", "-A", "--", ".", *excludes)
            if proc.returncode == 0:
                break
            message = proc.stderr.decode("utf-8", "surrogateescape")
            found = [p for p in _NO_COMMIT.findall(message) if p not in self.skipped]
            refused = [p for p in _INVALID.findall(message) if p not in self.refused]
            if not found and not refused:
                raise CheckpointError(f"git add failed: {message.strip()}")
            self.skipped += found
            self.refused += refused
        else:
            raise CheckpointError(f"git add failed: more than {_MAX_SKIPPED} nested repositories without a commit")
        files = [literal(p) for p in named if self._is_file(p) and self.prefix + p not in self.not_hashed]
        if files and self.run("add", "-f", "--", *files).returncode != 0:
            for one in files:  # one by one: git refuses a path inside a nested repository (uncovered)
                self.run("add", "-f", "--", one)
        return self.git("write-tree").decode().strip()

    def _is_file(self, rel: str) -> bool:
        try:
            with Workspace(self.root).locate(rel, follow_symlinks=False, literal=True) as loc:
                return loc.name is not None and stat.S_ISREG(
                    os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False).st_mode)
        except (ToolError, OSError):
            return False

    def gitlinks(self, tree: str, changes: dict[str, tuple[str, str]] | None = None) -> set[str]:
        """The workspace-relative paths of the gitlinks (submodules, nested repositories) in
        ``tree``: listed once, then kept up to date from what changed since the last tree
        (``changes``: :meth:`diff` from that tree to this one, when the caller has it)."""
        if self._links is None:
            listing = self.git("ls-tree", "-r", "-z", tree, "--", ".").decode("utf-8", "surrogateescape")
            links = {entry.split("\t", 1)[1] for entry in listing.split("\0") if entry.startswith("160000 ")}
        elif self._links[0] != tree:
            links = set(self._links[1])
            for path, (_, new) in (changes if changes is not None else self.diff(self._links[0], tree)).items():
                (links.add if new == "160000" else links.discard)(path)
        else:
            return self._links[1]
        self._links = (tree, links)
        return links

    def nested_states(self, tree: str, changes: dict[str, tuple[str, str]] | None = None) -> dict[str, str]:
        """``{workspace-relative path: fingerprint}`` of each nested repository or submodule with
        a work tree of its own (checked out) in the working tree whose :meth:`tree` is ``tree``,
        fingerprinted by the tree of its files (and of its own nested ones), so any change inside
        it shows (``changes``: as :meth:`gitlinks`)."""
        states: dict[str, str] = {}
        skipped = [p.removeprefix(self.prefix) for p in self.skipped if p.startswith(self.prefix)]
        for rel in sorted({*self.gitlinks(tree, changes), *skipped}):
            where = self.root / rel
            if self.depth >= _MAX_NESTED_DEPTH or not os.path.lexists(where / ".git") or where.is_symlink():
                continue
            snap = self._nested.get(rel)
            try:
                if snap is None:
                    repo = find_repository(where)
                    if repo is None:
                        continue
                    if not self._holds(repo, where):
                        states[rel] = f"outside {os.urandom(8).hex()}"  # never looked into: a state no other equals
                        continue
                    snap = self._nested[rel] = GitSnapshots(where, repo, self.ref_base, self.depth + 1,
                                                               self.workspace)
                if not self._holds(snap.isolated.repo, where):  # its .git was swapped since
                    states[rel] = f"outside {os.urandom(8).hex()}"
                    continue
                inner = snap.tree()
                deeper = snap.nested_states(inner)
            except CheckpointError as e:  # unreadable: a state that never equals another
                states[rel] = f"error {e} {os.urandom(8).hex()}"
                continue
            states[rel] = hashlib.sha256(repr((inner, sorted(deeper.items()))).encode()).hexdigest()
        return states

    def _holds(self, repo: Repository, where: Path) -> bool:
        """A nested repository kimik3 may run git on: its work tree is ``where`` itself and its
        objects lie inside it, or in this repository's git directory (a submodule's under
        ``.git/modules``, a linked worktree's); never one whose ``core.worktree`` or ``.git`` file
        leads elsewhere (its snapshot would read or write files outside the workspace)."""
        real = Path(os.path.realpath(where))
        common = Path(os.path.realpath(repo.common))
        return (Path(os.path.realpath(repo.top)) == real and common == repo.common
                and (common.is_relative_to(real) or common.is_relative_to(os.path.realpath(self.isolated.repo.common))))

    def commit(self, tree: str, parent: str | None, message: str) -> str:
        parents = ["-p", parent] if parent else []
        return self.git("commit-tree", "--no-gpg-sign", tree, *parents, "-m", message).decode().strip()

    def keep(self, name: str, commit: str) -> None:
        """Point ``<ref_base>/<name>`` at ``commit`` (so gc keeps it and its parents); a name one
        of this ref base holds already (a turn whose tools ran twice: the calls a person approved,
        after a resume) gets ``.2``, ``.3``, ... instead, so no earlier commit loses its ref."""
        ref = f"{self.ref_base}/{name}"
        for k in range(2, 100):
            if self.isolated.create_ref(ref, commit):
                return
            ref = f"{self.ref_base}/{name}.{k}"
        self.isolated.update_ref(ref, commit)

    def diff(self, before: str, after: str) -> dict[str, tuple[str, str]]:
        """``{workspace-relative path: (mode before, mode after)}`` of what differs between two
        commits (``000000``: absent; ``160000``: a gitlink)."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--relative",
                       before, after)
        fields = out.decode("utf-8", "surrogateescape").split("\0")
        found: dict[str, tuple[str, str]] = {}
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            modes = meta.lstrip(":").split(" ")
            if path and len(modes) >= 2:
                found[path] = (modes[0], modes[1])
        return found

    def close(self) -> None:
        for snap in self._nested.values():
            snap.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

