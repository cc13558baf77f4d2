"""Checkpoints and undo: the workspace is recorded around every turn that may write files, and
:func:`undo` puts the files a run's later turns changed back as they were.

In a git repository a snapshot is a commit of the whole working tree, untracked files included
(ignored ones only when a file tool names them), built in a temporary index (``GIT_INDEX_FILE``,
seeded from the user's index for its stat cache) with ``git add -A``, ``write-tree`` and
``commit-tree``, and kept alive by a side ref ``refs/kimik3/<session>/turn-N`` (the "after" commit,
its parent the "before" one); the user's index, HEAD, branches and working tree are never touched.
Elsewhere the files a turn's file tools name are copied before the turn (``bash`` changes are then
not covered). Each turn that changed files appends a ``{"checkpoint": {...}}`` record to the
session: the turn, the snapshots and the changed paths. Like ``git stash -u``, untracked files that
are not ignored are stored in the repository's object database; the refs stay until removed (``git
for-each-ref refs/kimik3 --format='delete %(refname)' | git update-ref --stdin``, then ``git gc``).

:func:`undo` restores only paths the undone turns changed; the user's other changes stay. It
refuses (:class:`~kimik3.CheckpointError`) when one of those files changed after the agent's last
turn, unless ``force``. Bytes are kept exactly: ``core.autocrlf`` is off for snapshots and
restores; a file under ``.gitattributes`` conversions (``text``, ``eol``, ``filter``: LFS) is
restored through git's own filters (``cat-file --filters``), as a checkout would write it (a file
mixing line endings under ``eol=crlf`` comes back with CRLF throughout).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from .._exceptions import CheckpointError
from ..agents import RunHooks, SessionWriter
from ..types import ToolCall

__all__ = ["WRITING_TOOLS", "Checkpoints", "undo"]

WRITING_TOOLS = frozenset({"write_file", "edit_file", "multi_edit", "apply_patch", "bash", "task"})
"""Tools whose turn gets a checkpoint (``task``: sub-agents may write)."""
_FILE_TOOLS = frozenset({"write_file", "edit_file", "multi_edit", "apply_patch"})
_GIT_CONFIG = ("-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.fsmonitor=false",
               "-c", "core.quotepath=false")
_IDENTITY = {"GIT_AUTHOR_NAME": "kimik3", "GIT_AUTHOR_EMAIL": "kimik3@localhost",
             "GIT_COMMITTER_NAME": "kimik3", "GIT_COMMITTER_EMAIL": "kimik3@localhost"}


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None, data: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(["git", *_GIT_CONFIG, *args], cwd=cwd, input=data, capture_output=True,
                              env=env, check=False)
    except OSError as e:
        raise CheckpointError(f"cannot run git: {e}") from e
    if proc.returncode != 0:
        raise CheckpointError(f"git {args[0]} failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
    return proc.stdout


def git_root(root: Path) -> Path | None:
    """The git directory of the repository whose work tree holds ``root``, or None (not in a work
    tree: no repository, a bare one, inside ``.git``; no git): then files are copied."""
    if shutil.which("git") is None:
        return None
    try:
        inside, gitdir = _git(root, "rev-parse", "--is-inside-work-tree", "--absolute-git-dir").decode().splitlines()
    except (CheckpointError, ValueError):
        return None
    return Path(gitdir) if inside == "true" else None


class _GitSnapshots:
    def __init__(self, root: Path, gitdir: Path, ref_base: str) -> None:
        self.root = root
        self.ref_base = ref_base
        self._tmp = Path(tempfile.mkdtemp(prefix="kimik3-index-"))
        self.index = self._tmp / "index"
        user_index = gitdir / "index"
        if user_index.is_file():
            shutil.copy2(user_index, self.index)  # its mtime too: git's racy-clean check needs it
        self.env = {**os.environ, **_IDENTITY, "GIT_INDEX_FILE": str(self.index)}

    def tree(self, named: Sequence[str] = ()) -> str:
        """The tree of the working tree under the workspace (``add -A`` into the private index),
        with the files of ``named`` (paths the file tools name) even when ``.gitignore`` skips them."""
        _git(self.root, "add", "-A", "--", ".", env=self.env)
        files = [rel for p in named if (rel := _inside(self.root, p)) is not None and (self.root / rel).is_file()]
        if files:
            with contextlib.suppress(CheckpointError):  # e.g. in a nested repository: left uncovered
                _git(self.root, "add", "-f", "--", *files, env=self.env)
        return _git(self.root, "write-tree", env=self.env).decode().strip()

    def commit(self, tree: str, parent: str | None, message: str) -> str:
        parents = ["-p", parent] if parent else []
        return _git(self.root, "commit-tree", tree, *parents, "-m", message, env=self.env).decode().strip()

    def keep(self, name: str, commit: str) -> None:
        """Point ``<ref_base>/<name>`` at ``commit`` (so gc keeps it and its parents)."""
        _git(self.root, "update-ref", f"{self.ref_base}/{name}", commit)

    def changed(self, before: str, after: str) -> list[str]:
        out = _git(self.root, "diff-tree", "-r", "-z", "--no-renames", "--name-only", "--relative", before, after)
        return sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


def _inside(root: Path, path: str) -> str | None:
    """``path`` relative to ``root`` (None outside it)."""
    p = Path(os.path.normpath(root / path))
    return p.relative_to(root).as_posix() if p.is_relative_to(root) and p != root else None


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if not path.is_symlink() else None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _call_paths(calls: Sequence[ToolCall]) -> list[str]:
    from ._patch import patch_paths

    paths: list[str] = []
    for call in calls:
        if call.function.name not in _FILE_TOOLS:
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


class Checkpoints(RunHooks):
    """Records the workspace around each turn that may write (see the module docstring).

    Args:
        root: the workspace root.
        store: where non-git copies go (default: ``<session file>.checkpoints/``; without a
            session, a temporary directory removed at the end of the run).
        writing_tools: names of the tools that trigger a checkpoint.

    Attributes:
        records: the checkpoint records of this run (also appended to the session).
    """

    def __init__(self, root: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None,
                 writing_tools: frozenset[str] = WRITING_TOOLS) -> None:
        self.root = Path(root).resolve()
        self.store = Path(store) if store is not None else None
        self.writing_tools = writing_tools
        self.records: list[dict[str, Any]] = []
        self._session: SessionWriter | None = None
        self._git: _GitSnapshots | None = None
        self._offset = 0
        self._before: str | None = None
        self._last: tuple[str, str] | None = None  # (tree, commit) after the last writing turn
        self._before_tree = ""
        self._copies: dict[str, str | None] = {}
        self._named: list[str] = []
        self._tmp_store: Path | None = None

    async def run_start(self, session: SessionWriter | None) -> None:
        self._session = session
        if session is not None and not session.new:  # a resumed session: turns go on counting
            text = session.path.read_text(encoding="utf-8", errors="replace")
            self._offset = text.count('{"message": {"role": "assistant"')
        gitdir = await anyio.to_thread.run_sync(git_root, self.root)
        if gitdir is not None:
            stem = re.sub(r"[^A-Za-z0-9._-]", "_", session.path.stem if session else "run")
            stamp = f"{stem}-{os.getpid()}-{id(self):x}"
            self._git = _GitSnapshots(self.root, gitdir, f"refs/kimik3/{stamp}")
        elif self.store is None:
            if session is not None:
                self.store = session.path.with_name(session.path.name + ".checkpoints")
            else:
                self._tmp_store = Path(tempfile.mkdtemp(prefix="kimik3-checkpoints-"))
                self.store = self._tmp_store

    def _wants(self, calls: Sequence[ToolCall]) -> bool:
        return any(c.function.name in self.writing_tools for c in calls)

    async def before_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        self._before = None
        self._copies = {}
        if not self._wants(calls):
            return
        n = turn + self._offset
        if self._git is not None:
            self._named = _call_paths(calls)
            self._before = await anyio.to_thread.run_sync(self._git_before, n)
            return
        assert self.store is not None
        folder = self.store / f"turn-{n}"
        for i, path in enumerate(dict.fromkeys(_call_paths(calls))):
            p = Path(os.path.normpath(self.root / path))
            if not p.is_relative_to(self.root) or (p.exists() and not p.is_file()):
                continue
            rel = p.relative_to(self.root).as_posix()
            if rel in self._copies:
                continue
            if p.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, folder / f"{i}.bin", follow_symlinks=False)
                self._copies[rel] = f"{i}.bin"
            else:
                self._copies[rel] = None

    def _git_before(self, n: int) -> str:
        """The commit of the state before turn ``n``: the last turn's "after" when nothing changed
        since (no new object, no ref), else a new parentless commit."""
        assert self._git is not None
        tree = self._before_tree = self._git.tree(self._named)
        if self._last is not None and self._last[0] == tree:
            return self._last[1]
        return self._git.commit(tree, None, f"kimik3 checkpoint before turn {n}")

    def _git_after(self, n: int, before: str) -> dict[str, Any] | None:
        """The record of turn ``n`` (None when it changed nothing). One ref per turn,
        ``turn-N``, on the "after" commit whose parent is the "before" one."""
        assert self._git is not None
        git = self._git
        tree = git.tree(self._named)
        if tree == self._before_tree:
            self._last = (tree, before)
            return None
        after = git.commit(tree, before, f"kimik3 checkpoint after turn {n}")
        git.keep(f"turn-{n}", after)
        self._last = (tree, after)
        return {"turn": n, "kind": "git", "root": str(self.root), "before": before, "after": after,
                "changed": git.changed(before, after)}

    async def after_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        if not self._wants(calls):
            return
        n = turn + self._offset
        record: dict[str, Any] | None
        if self._git is not None and self._before is not None:
            record = await anyio.to_thread.run_sync(self._git_after, n, self._before)
        elif self._git is None and self._copies:
            assert self.store is not None
            digests = {rel: _digest(self.root / rel) for rel in self._copies}
            folder = self.store / f"turn-{n}"
            changed = sorted(rel for rel, name in self._copies.items()
                             if digests[rel] != (_digest(folder / name) if name else None))
            record = {"turn": n, "kind": "copy", "root": str(self.root), "dir": str(folder),
                      "files": {rel: self._copies[rel] for rel in changed},
                      "after": {rel: digests[rel] for rel in changed}, "changed": changed}
        else:
            return
        if record is None or not record["changed"]:
            return
        self.records.append(record)
        if self._session is not None:
            self._session.record("checkpoint", record)

    async def run_end(self) -> None:
        if self._git is not None:
            self._git.close()
        if self._tmp_store is not None:
            shutil.rmtree(self._tmp_store, ignore_errors=True)


# -- undo ------------------------------------------------------------------------------------


def session_checkpoints(session: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The checkpoint records of a session file, in order, without the turns an undo took back.

    Raises:
        CheckpointError: the file cannot be read.
    """
    try:
        lines = Path(session).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise CheckpointError(f"cannot read session {session}: {e}") from e
    records: list[dict[str, Any]] = []
    for line in lines:
        if not line.startswith(('{"checkpoint"', '{"undo"')):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if isinstance(record.get("checkpoint"), dict):
            records.append(record["checkpoint"])
        elif isinstance(record.get("undo"), dict):  # turns after an undo's target are undone
            records = [r for r in records if r["turn"] <= record["undo"]["to"]]
    return records


def _write(path: Path, data: bytes, mode: str) -> None:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "120000":
        path.unlink(missing_ok=True)
        os.symlink(os.fsdecode(data), path)
        return
    path.write_bytes(data)
    os.chmod(path, 0o755 if mode == "100755" else 0o644)


def _remove(path: Path, root: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    parent = path.parent
    while parent != root and parent.is_relative_to(root):  # directories the agent made, now empty
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def _restore_git(root: Path, first: dict[str, Any], later: list[dict[str, Any]], paths: list[str],
                 force: bool) -> None:
    if not force:
        git = _GitSnapshots(root, Path(_git(root, "rev-parse", "--absolute-git-dir").decode().strip()),
                            "refs/kimik3/undo")
        try:
            now = git.commit(git.tree(paths), None, "kimik3 undo check")
            git.keep("now", now)
            last: dict[str, str] = {}
            for rec in later:
                for p in rec["changed"]:
                    last[p] = rec["after"]
            drifted = [p for p in paths if p in git.changed(last[p], now)]
        finally:
            _git(root, "update-ref", "-d", "refs/kimik3/undo/now")
            git.close()
        if drifted:
            raise CheckpointError("changed after the agent's last turn (use --force to overwrite): "
                                  + ", ".join(drifted))
    listing = _git(root, "ls-tree", "-z", first["before"], "--", *paths).decode("utf-8", "surrogateescape")
    entries = {}
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        mode, _, sha = meta.split()
        entries[name] = (mode, sha)
    prefix = _git(root, "rev-parse", "--show-prefix").decode().strip()
    for p in paths:
        target = root / p
        found = entries.get(prefix + p) or entries.get(p)
        if found is None:
            _remove(target, root)
        else:
            name = prefix + p  # <rev>:<path> takes the path from the repository's top
            # --filters: smudge and eol conversion as a checkout would write it (LFS, eol=crlf)
            data = _git(root, "cat-file", "--filters", f"{first['before']}:{name}") if found[0] != "120000" \
                else _git(root, "cat-file", "blob", found[1])
            _write(target, data, found[0])


def _restore_copies(root: Path, later: list[dict[str, Any]], paths: list[str], force: bool) -> None:
    if not force:
        last: dict[str, str | None] = {}
        for rec in later:
            last.update(rec["after"])
        drifted = [p for p in paths if _digest(root / p) != last[p]]
        if drifted:
            raise CheckpointError("changed after the agent's last turn (use --force to overwrite): "
                                  + ", ".join(drifted))
    done: set[str] = set()
    for rec in later:  # the first backup after the target turn holds the state to go back to
        for rel, name in rec["files"].items():
            if rel in done:
                continue
            done.add(rel)
            if name is None:
                _remove(root / rel, root)
            else:
                _write(root / rel, (Path(rec["dir"]) / name).read_bytes(), "100644")
                shutil.copystat(Path(rec["dir"]) / name, root / rel)


def undo(session: str | os.PathLike[str], to_turn: int = 0, *, force: bool = False) -> list[str]:
    """Put back the files that turns after ``to_turn`` changed, as they were after ``to_turn``.

    Args:
        session: a session file with checkpoint records.
        to_turn: the turn to go back to (0: before the first recorded change).
        force: overwrite files that changed after the agent's last turn.

    Returns:
        The restored workspace-relative paths (removed ones included), sorted. An
        ``{"undo": {...}}`` record is appended to the session, so a later undo starts from here.

    Raises:
        CheckpointError: no checkpoints after ``to_turn``, a drifted file (without ``force``),
            git failing.
    """
    records = [r for r in session_checkpoints(session) if r["turn"] > to_turn]
    if not records:
        raise CheckpointError(f"{session}: no recorded changes after turn {to_turn}; nothing to undo")
    root = Path(records[0]["root"])
    paths = sorted({p for r in records for p in r["changed"]})
    if records[0]["kind"] == "git":
        _restore_git(root, records[0], records, paths, force)
    else:
        _restore_copies(root, records, paths, force)
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"undo": {"to": to_turn, "paths": paths}}) + "\n")
    return paths
