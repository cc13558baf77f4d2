"""Checkpoints: the workspace is recorded around every turn that may write files, so that
:func:`~kimik3.harness.undo` (:mod:`._undo`) can put back what a run's later turns changed.

In a git repository a snapshot (:mod:`._snapshots`) is a commit of the whole working tree,
untracked files included (ignored ones only when a file tool names them), built in a temporary
index (``GIT_INDEX_FILE``, seeded from the user's index for its stat cache) with ``git add -A``,
``write-tree`` and ``commit-tree``, and kept alive by a side ref ``refs/kimik3/<session>/turn-N``
(the "after" commit, its parent the "before" one; ``<session>`` is the session file's name with
every character but letters, digits, ``_`` and ``-`` replaced, so any name makes a valid ref); the
user's index, HEAD, branches and working tree are never touched. A sparse checkout is recorded as
the files on disk are (the temporary index has no skip-worktree bits and ``core.sparseCheckout`` is
off for it), so writes outside the cone are covered. Elsewhere the files a turn's file tools name
are copied before the turn (each path resolved as the file tools resolve it), into the copy store's
``turn-N/`` (:mod:`._store`: outside the workspace, ``0700``, kept from every tool, each copy's
SHA-256 in the record and checked by undo; a sparse file or one over
:data:`~._store.MAX_COPY_BYTES` is not copied, and ``uncovered`` says so).

Each turn that changed files appends a ``{"checkpoint": {...}}`` record to the session::

    {"turn": N, "kind": "git", "root": "<workspace>", "before": "<commit>", "after": "<commit>",
     "changed": ["a.txt", ...], "uncovered": {"vendor/lib": "<why>"}}
    {"turn": N, "kind": "copy", "root": "<workspace>", "dir": "<store>/turn-N",
     "files": {"a.txt": "0.bin" | null}, "after": {"a.txt": "<sha256>" | null},
     "copied": {"a.txt": "<sha256 of 0.bin>"}, "changed": [...], "uncovered": {".": "<why>"}}

``uncovered`` names what the checkpoint could not record, so undo can say so instead of
reporting success: a submodule or nested repository whose files changed (its own files are not
in the outer snapshots; a gitlink that moved is not restored either), and, outside git, a turn
that ran ``bash`` or a sub-agent (``"."``: what commands change is not known there). A turn
whose only changes are uncovered still gets a record (``changed`` empty).

Like ``git stash -u``, untracked files that are not ignored are stored in the repository's object
database; the refs stay until removed (``git for-each-ref refs/kimik3 --format='delete
%(refname)' | git update-ref --stdin``, then ``git gc``). Bytes are kept exactly:
``core.autocrlf`` is off for snapshots and restores.

A workspace's repository (and each nested one) is the model's to write, so git runs there
without the repository's configuration (:mod:`._git`): no filter driver, hook, fsmonitor,
promisor remote or other program the repository names ever runs for a snapshot or an undo.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from .._exceptions import CheckpointError, ToolError
from ..agents import RunHooks, SessionWriter
from ..tools.coding.api import SessionFiles, Workspace
from ..types import ToolCall
from ._git import find_repository
from ._snapshots import GitSnapshots
from ._store import STORE_WHAT, copy_into, default_store, not_copied, open_store, open_turn, resolved

__all__ = ["WRITING_TOOLS", "Checkpoints"]

WRITING_TOOLS = frozenset({"write_file", "edit_file", "multi_edit", "apply_patch", "bash", "task"})
"""Tools whose turn gets a checkpoint (``task``: sub-agents may write)."""
FILE_TOOLS = frozenset({"write_file", "edit_file", "multi_edit", "apply_patch"})
_NESTED_NOTE = ("a submodule or nested repository: the files inside it are not in the checkpoints, and "
                "undo does not move its HEAD")
_UNRECORDED_NOTE = ("outside a git repository the changes {tools} made are not recorded (only the files the file "
                    "tools name are copied)")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def ref_stem(session: SessionWriter | None) -> str:
    """The session's part of the ref names: its file name without ``.jsonl``, every character
    but ASCII letters, digits, ``_`` and ``-`` replaced by ``_`` (git's ref-name rules forbid a
    leading dot, ``..``, ``.lock`` and more; none of those can remain)."""
    stem = session.path.name.removesuffix(".jsonl") if session is not None else "run"
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "run"


def _call_paths(calls: Sequence[ToolCall]) -> list[str]:
    from ._patch import patch_paths

    paths: list[str] = []
    for call in calls:
        if call.function.name not in FILE_TOOLS:
            continue
        try:
            args = call.function.parsed_arguments()
        except ValueError:
            continue
        if isinstance(args.get("path"), str):
            paths.append(args["path"])
        if isinstance(args.get("patch"), str):
            paths += patch_paths(args["patch"])
    return paths


def _hash(fd: int) -> str | None:
    """SHA-256 of the open file ``fd`` (closed here), None when it is not a regular file."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def digest(ws: Workspace, rel: str) -> str | None:
    """SHA-256 of the regular file ``rel`` (walked from the root, no symlink followed), None when
    it is missing or not a regular file."""
    try:
        with ws.locate(rel, follow_symlinks=False, literal=True) as loc:
            if loc.name is None:
                return None
            fd = os.open(loc.name, _READ_FLAGS, dir_fd=loc.dir_fd)
    except (ToolError, OSError):
        return None
    return _hash(fd)


def _fingerprint(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat_of(ws: Workspace, rel: str) -> tuple[int, ...] | None:
    """:func:`_fingerprint` of ``rel`` now (no symlink followed), None when it is missing."""
    try:
        with ws.locate(rel, follow_symlinks=False, literal=True) as loc:
            return _fingerprint(os.stat(loc.name or ".", dir_fd=loc.dir_fd, follow_symlinks=False))
    except (ToolError, OSError):
        return None


class Checkpoints(RunHooks):
    """Records the workspace around each turn that may write (see the module docstring).

    Args:
        root: the workspace root.
        store: where non-git copies go (default: ``<session file>.checkpoints/``, or, where that
            lies in the workspace, ``${KIMIK3_HOME:-~/.kimik3}/checkpoints/...``: :mod:`._store`;
            without a session, a temporary directory removed at the end of the run). Pass the
            same ``store`` to :func:`~kimik3.harness.undo`.
        writing_tools: names of the tools that trigger a checkpoint.
        kept: the run's list of what no tool writes (a sandbox's
            :attr:`~kimik3.tools.coding.Sandbox.sessions`): the store is added to it.

    Attributes:
        records: the checkpoint records of this run (also appended to the session).
    """

    def __init__(self, root: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None,
                 writing_tools: frozenset[str] = WRITING_TOOLS, kept: SessionFiles | None = None) -> None:
        self.root = Path(root).resolve()
        self.kept = kept
        self.ws = Workspace(self.root)
        self.store = Path(store) if store is not None else None
        self.writing_tools = writing_tools
        self.records: list[dict[str, Any]] = []
        self._session: SessionWriter | None = None
        self._git: GitSnapshots | None = None
        self._offset = 0
        self._before: str | None = None
        self._last: tuple[str, str, dict[str, str]] | None = None  # (tree, commit, nested) after the last turn
        self._before_state: tuple[str, dict[str, str]] = ("", {})
        self._before_big: dict[str, tuple[str, tuple[int, ...]]] = {}  # not hashed before the turn
        self._before_refused: set[str] = set()  # names git refused before the turn
        self._copies: dict[str, str | None] = {}
        self._digests: dict[str, str] = {}  # each copy's SHA-256, taken as it was written
        self._skipped: dict[str, tuple[str, tuple[int, ...]]] = {}  # not copied: why, and its stat then
        self._named: list[str] = []
        self._pending: list[str] = []
        self._tmp_store: Path | None = None
        self._moved: str | None = None  # why git checkpoints stopped during the run

    async def run_start(self, session: SessionWriter | None) -> None:
        self._session = session
        if session is not None and not session.new:  # a resumed session: turns go on counting
            self._offset = sum(r.message is not None and r.message.role == "assistant"  # the writer's log: no
                               for r in session.log.records_of("message"))  # second read (issue 42)
        repo = await anyio.to_thread.run_sync(find_repository, self.root)
        self._moved = None
        if repo is not None:
            stamp = f"{ref_stem(session)}-{os.getpid()}-{id(self):x}"
            try:
                self._git = await anyio.to_thread.run_sync(GitSnapshots, self.root, repo, f"refs/kimik3/{stamp}")
                return
            except CheckpointError as e:
                self._stop_git(f"git checkpoints cannot start ({e})")
        self._copy_store(session)

    def _copy_store(self, session: SessionWriter | None) -> None:
        """Choose the copy store (:mod:`._store`), make it now (before the sandbox starts, so it
        binds it read-only) and keep it from every tool."""
        if self.store is None:
            if session is not None:
                self.store = default_store(session.path, self.root)
            else:
                self._tmp_store = Path(tempfile.mkdtemp(prefix="kimik3-checkpoints-"))
                self.store = self._tmp_store
        self.store = resolved(self.store)  # a symlink above it, re-pointed later, is not followed then
        if self.kept is not None:
            self.kept.keep(self.store, STORE_WHAT)
        os.close(open_store(self.store))

    def _wants(self, calls: Sequence[ToolCall]) -> bool:
        return any(c.function.name in self.writing_tools for c in calls)

    def _named_files(self, calls: Sequence[ToolCall]) -> tuple[list[str], list[str]]:
        """The workspace-relative paths the turn's file tools name, resolved as those tools resolve
        them (symlinks inside the workspace followed), and the paths that cannot be resolved now
        (a directory on the way is missing: the tool may make it). Paths that lead outside the
        workspace are never resolved."""
        out: list[str] = []
        pending: list[str] = []
        for path in _call_paths(calls):
            try:
                with self.ws.locate(path) as loc:
                    if loc.name is not None:
                        out.append(loc.rel)
            except ToolError:
                pending.append(path)
        return list(dict.fromkeys(out)), pending

    async def before_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        self._before = None
        self._copies, self._digests, self._skipped = {}, {}, {}
        if not self._wants(calls):
            return
        n = turn + self._offset
        self._named, self._pending = await anyio.to_thread.run_sync(self._named_files, calls)
        await self._check_repository()
        if self._git is not None:
            try:
                self._before = await anyio.to_thread.run_sync(self._git_before, n)
                return
            except CheckpointError as e:
                self._stop_git(f"git checkpoints failed before turn {n} ({e})")
                self._copy_store(self._session)
        await anyio.to_thread.run_sync(self._copy_before, n)

    async def _check_repository(self) -> None:
        """Stop git checkpoints (the copy kind from now on, with a :class:`RuntimeWarning` and the
        reason in each record's ``uncovered``) when the workspace's repository is no longer the
        one found at the run's start: its ``.git`` file or ``commondir`` was rewritten (it may lead
        to a git directory outside the workspace) or it is gone. kimik3's git never follows the
        new pointers (:meth:`._git.Repository.env` names both directories); a repository that
        was a linked worktree at the start is the user's own and stays trusted."""
        if self._git is None:
            return
        start = self._git.isolated.repo
        now = await anyio.to_thread.run_sync(find_repository, self.root)
        if now is not None and (os.path.realpath(now.gitdir), now.common) == (os.path.realpath(start.gitdir),
                                                                              start.common):
            return
        found = "it is gone" if now is None else f"its git directory {now.gitdir!s:.130}, its common directory " \
            f"{now.common!s:.130}"
        self._stop_git(f"the workspace's repository changed during the run (now {found})")
        self._copy_store(self._session)

    def _stop_git(self, why: str) -> None:
        """No more git checkpoints in this run, for ``why`` (a :class:`RuntimeWarning`, and each
        later record's ``uncovered`` says it): a git checkpoint that fails never ends the run
        (issue 40: a name git refuses, a repository whose objects folder is a symlink out)."""
        self._moved = f"{why}: no more git checkpoints, only the files the file tools name are copied"
        warnings.warn(f"kimik3: {self._moved}", RuntimeWarning, stacklevel=3)
        if self._git is not None:
            self._git.close()
        self._git = None
        self._last = None

    def _copy_before(self, n: int) -> None:
        """Copy each named file into the store's ``turn-N`` (:mod:`._store`: from the store's
        descriptor, never through a symlink; a sparse or too large file is only noted)."""
        assert self.store is not None
        store_fd = open_store(self.store)
        turn_fd: int | None = None
        try:
            turn_fd = open_turn(store_fd, n, create=True)
            assert turn_fd is not None
            # a turn whose tools run twice (the calls a person approved, after a resume) adds copies
            taken = [int(p.split(".")[0]) for p in os.listdir(turn_fd) if p.split(".")[0].isdigit()]
            i = max(taken, default=-1) + 1
            for rel in self._named:
                try:
                    with self.ws.locate(rel, follow_symlinks=False, literal=True) as loc:
                        assert loc.name is not None
                        fd = os.open(loc.name, _READ_FLAGS, dir_fd=loc.dir_fd)
                except FileNotFoundError:
                    self._copies[rel] = None  # made by the turn: undo removes it
                    continue
                except (ToolError, OSError, AssertionError):
                    continue
                with os.fdopen(fd, "rb"):
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    why = not_copied(st)
                    if why is not None:
                        self._skipped[rel] = (why, _fingerprint(st))
                        continue
                    name = f"{i}.bin"
                    i += 1
                    self._digests[rel] = copy_into(turn_fd, name, fd, st)
                self._copies[rel] = name
        finally:
            os.close(store_fd)
            if turn_fd is not None:
                os.close(turn_fd)

    def _git_before(self, n: int) -> str:
        """The commit of the state before turn ``n``: the last turn's "after" when nothing changed
        since (no new object, no ref), else a new parentless commit."""
        assert self._git is not None
        tree = self._git.tree(self._named)
        self._before_state = (tree, self._git.nested_states(tree))
        self._before_big = dict(self._git.not_hashed)
        self._before_refused = set(self._git.refused)
        if self._last is not None and self._last[0] == tree:
            return self._last[1]
        return self._git.commit(tree, None, f"kimik3 checkpoint before turn {n}")

    def _git_after(self, n: int, before: str) -> dict[str, Any] | None:
        """The record of turn ``n`` (None when it changed nothing). One ref per turn,
        ``turn-N``, on the "after" commit whose parent is the "before" one."""
        assert self._git is not None
        snap = self._git
        tree = snap.tree(self._named + self._pending_now())
        old_tree, old_nested = self._before_state
        after, changes = before, {}
        if tree != old_tree:
            after = snap.commit(tree, before, f"kimik3 checkpoint after turn {n}")
            changes = snap.diff(before, after)
        nested = snap.nested_states(tree, changes)
        uncovered = {p: _NESTED_NOTE for p in sorted({*nested, *old_nested}) if nested.get(p) != old_nested.get(p)}
        for p in {*snap.not_hashed, *self._before_big}:  # sparse or huge, changed by the turn: said
            if snap.not_hashed.get(p) != self._before_big.get(p) and p.startswith(snap.prefix):
                why = (snap.not_hashed.get(p) or self._before_big[p])[0]
                uncovered[p.removeprefix(snap.prefix)] = f"{why}; undo cannot restore it"
        for p in set(snap.refused) - self._before_refused:
            uncovered[p.removeprefix(snap.prefix)] = "a name git refuses: not in the checkpoint; undo cannot restore it"
        self._last = (tree, after, nested)
        if tree == old_tree:
            return {"turn": n, "kind": "git", "root": str(self.root), "before": before, "after": before,
                    "changed": [], "uncovered": uncovered} if uncovered else None
        snap.keep(f"turn-{n}", after)
        changed = []
        for path, modes in sorted(changes.items()):
            if "160000" in modes:  # a gitlink: a submodule's HEAD moved, or a repository appeared
                uncovered[path] = _NESTED_NOTE
            else:
                changed.append(path)
        record = {"turn": n, "kind": "git", "root": str(self.root), "before": before, "after": after,
                  "changed": changed}
        return {**record, "uncovered": dict(sorted(uncovered.items()))} if uncovered else record

    def _pending_now(self) -> list[str]:
        """The paths that could not be resolved before the turn, resolved now (made by it)."""
        out = []
        for path in self._pending:
            try:
                with self.ws.locate(path) as loc:
                    if loc.name is not None:
                        out.append(loc.rel)
            except ToolError:
                continue
        return out

    def _copy_after(self, n: int, calls: Sequence[ToolCall]) -> dict[str, Any] | None:
        assert self.store is not None
        folder = self.store / f"turn-{n}"
        for rel in self._pending_now():  # its directory did not exist before the turn: neither did it
            self._copies.setdefault(rel, None)
        digests = {rel: digest(self.ws, rel) for rel in self._copies}
        changed = sorted(rel for rel, name in self._copies.items()
                         if digests[rel] != (self._digests[rel] if name else None))
        others = sorted({c.function.name for c in calls if c.function.name not in FILE_TOOLS} & self.writing_tools)
        uncovered = {".": _UNRECORDED_NOTE.format(tools=" and ".join(others))} if others else {}
        for rel, (why, then) in self._skipped.items():  # a file not copied that the turn changed: said
            if _stat_of(self.ws, rel) != then:
                uncovered[rel] = f"{why}; undo cannot restore it"
        if self._moved is not None:
            uncovered["."] = self._moved
        if not changed and not uncovered:
            return None
        record = {"turn": n, "kind": "copy", "root": str(self.root), "dir": str(folder.absolute()),
                  "files": {rel: self._copies[rel] for rel in changed},
                  "after": {rel: digests[rel] for rel in changed}, "changed": changed,
                  "copied": {rel: self._digests[rel] for rel in changed if self._copies[rel] is not None}}
        return {**record, "uncovered": uncovered} if uncovered else record

    async def after_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        if not self._wants(calls):
            return
        n = turn + self._offset
        record: dict[str, Any] | None
        if self._git is not None and self._before is not None:
            try:
                record = await anyio.to_thread.run_sync(self._git_after, n, self._before)
            except CheckpointError as e:
                self._stop_git(f"the git checkpoint after turn {n} failed ({e})")
                self._copy_store(self._session)
                record = await anyio.to_thread.run_sync(self._copy_after, n, calls)
        elif self._git is None:
            record = await anyio.to_thread.run_sync(self._copy_after, n, calls)
        else:
            return
        if record is None:
            return
        self.records.append(record)
        if self._session is not None:
            self._session.record("checkpoint", record)

    async def run_end(self) -> None:
        if self._git is not None:
            self._git.close()
        if self._tmp_store is not None:
            shutil.rmtree(self._tmp_store, ignore_errors=True)
