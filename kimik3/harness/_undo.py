"""Undo: put back the files a session's later turns changed, from its checkpoint records
(:mod:`._checkpoints`), touching nothing outside the workspace and losing nothing.

- **Only the workspace undo is run for.** Every record is validated before anything is read or
  written: its ``root`` must be that workspace (``kimik3 undo --workspace``, default the current
  directory); ``changed`` / ``files`` / ``after`` / ``uncovered`` entries must be relative paths
  inside it (no ``..``, no absolute path, no empty or ``.`` component; no ``.git`` component in
  a git record); commits must be commit ids, copies ``N.bin`` files of kimik3's own copy
  directory (``<session file>.checkpoints/turn-N``, the one under ``${KIMIK3_HOME}`` where that
  lies in the workspace, or the ``store`` given: :mod:`._store`). A bad record is a
  :class:`~kimik3.CheckpointError` naming the session line, and nothing is changed.
- **A copy is restored only as kimik3 stored it.** Each copy is read with ``O_NOFOLLOW`` from
  its store's descriptor and its SHA-256 checked against the record's ``copied`` digest; a copy
  edited since (or, for an older record without digests, one lying in the workspace) is refused,
  naming it, and nothing is changed. A file a turn changed that was not copied (sparse, or over
  :data:`~._store.MAX_COPY_BYTES`) is in the record's ``uncovered`` and named by undo.
- **No symlink is followed.** Each path is walked component by component from the workspace's
  directory descriptor with the coding tools' walk (:meth:`~kimik3.tools.coding._paths.Workspace.
  locate`, ``follow_symlinks=False``): a symlink on the way to a target is refused, a target that
  is a symlink is replaced as a symlink, never written through.
- **All or nothing.** Every blob (or copy) is fetched and every target checked first: files
  changed after the agent's last turn (unless ``force``), a directory holding files the agent's
  turns did not make where a file must go (refused even with ``force``: move it away first), a
  symlink or file on the way. Then removals (deepest first), then writes (each through a
  temporary file renamed into place). A failure midway puts back everything already changed
  and says what failed. A path already as it should be is left alone, so an undo that was
  interrupted never blocks the next one.
- **What a checkpoint cannot cover is said.** A record's ``uncovered`` entries (a submodule or
  nested repository whose files changed, ``bash`` outside git) and gitlinks among the changed
  paths make undo refuse, naming them, unless ``partial`` (then the rest is restored and they
  are logged as not undone).

Git checkpoints are restored from the repository's objects; ``.gitattributes`` conversions
(``text``, ``eol``, and ``filter`` drivers of the user's own configuration: LFS) go through git's
own filters (``cat-file --filters``), as a checkout would write them; git runs without the
repository's configuration (:mod:`._git`), so no driver, hook or remote the repository names runs.
Copies come back with their mode and times.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

from .._exceptions import CheckpointError, ToolError
from ..agents import SessionWriter
from ..tools.coding._api import Workspace
from ._checkpoints import digest
from ._git import find_repository
from ._records import session_checkpoints, undone_checkpoints
from ._restore import ABSENT, Plan, State, Tree, apply, check_targets, depth, remove_empty_parents
from ._snapshots import GitSnapshots
from ._store import read_copy

__all__ = ["undo"]

log = logging.getLogger("kimik3.harness")

_GIT_MODES = {"100644": 0o666, "100755": 0o777}  # the mode a file is created with (the umask applies)


def _git_plan(root: Path, records: list[dict[str, Any]], paths: list[str]) -> Plan:
    repo = find_repository(root)
    if repo is None:
        raise CheckpointError(f"{root} is not in a git work tree any more; its git checkpoints cannot be restored")
    snap = GitSnapshots(root, repo, "refs/kimik3/undo")
    try:
        return _git_targets(snap, records, paths)
    finally:
        snap.close()


def _git_targets(snap: GitSnapshots, records: list[dict[str, Any]], paths: list[str]) -> Plan:
    before = records[0]["before"]
    last = {p: rec["after"] for rec in records for p in rec["changed"]}
    for rec in records:
        for sha in {rec["before"], rec["after"]}:
            try:
                is_commit = snap.git("cat-file", "-t", sha).strip() == b"commit"
            except CheckpointError:
                is_commit = False
            if not is_commit:
                raise CheckpointError(f"the checkpoint of turn {rec['turn']} names {sha}, which is not a commit of "
                                      f"the repository of {snap.root}; nothing was changed")
    now = snap.commit(snap.tree(paths), None, "kimik3 undo check")
    from_before = snap.diff(before, now)
    from_after = {sha: snap.diff(sha, now) for sha in set(last.values())}
    listing = snap.git("ls-tree", "-r", "-z", before, "--", ".").decode("utf-8", "surrogateescape")
    entries: dict[str, tuple[str, str]] = {}
    known_dirs: set[str] = set()
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        mode, _, sha = meta.split()
        entries[name] = (mode, sha)
        known_dirs.update("/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1))
    uncovered = {}
    for p in paths:
        modes = {*from_before.get(p, ()), *from_after[last[p]].get(p, ()), entries.get(p, ("",))[0]}
        if "160000" in modes:
            uncovered[p] = "a gitlink (submodule or nested repository): undo does not move its HEAD"
    covered = [p for p in paths if p not in uncovered]
    targets: dict[str, State] = {}
    for p in covered:
        found = entries.get(p)
        if found is None:
            targets[p] = ABSENT
        elif found[0] == "120000":
            targets[p] = State("link", link=os.fsdecode(snap.git("cat-file", "blob", found[1])))
        else:  # --filters: smudge and eol conversion as a checkout would write it (LFS, eol=crlf)
            data = snap.git("cat-file", "--filters", f"{before}:{snap.prefix}{p}")
            targets[p] = State("file", data, create=_GIT_MODES.get(found[0], 0o666))
    done = {p for p in covered if p not in from_before}
    drifted = [p for p in covered if p not in done and p in from_after[last[p]]]
    return Plan(targets, drifted, done, uncovered, known_dirs)


def _copy_plan(root: Path, records: list[dict[str, Any]], paths: list[str]) -> Plan:
    ws = Workspace(root)
    last: dict[str, str | None] = {}
    for rec in records:
        last.update(rec["after"])
    targets: dict[str, State] = {}
    digests: dict[str, str | None] = {}
    for rec in records:  # the first copy after the target turn holds the state to go back to
        for rel, name in rec["files"].items():
            if rel in targets:
                continue
            if name is None:
                targets[rel], digests[rel] = ABSENT, None
                continue
            want = rec["copied"].get(rel)
            if want is None and _inside(rec["dir"], root):  # an older record: nothing to check the copy against
                raise CheckpointError(f"the copy of {rel} lies in the workspace ({rec['dir']}) and its record has no "
                                      "digest to check it against (a session of an older kimik3): the model could "
                                      "have changed it; restore it by hand if you trust it; nothing was changed")
            data, st = read_copy(rec["dir"], name, want, rel)
            targets[rel] = State("file", data, stat.S_IMODE(st.st_mode), (st.st_atime_ns, st.st_mtime_ns))
            digests[rel] = hashlib.sha256(data).hexdigest()
    now = {p: digest(ws, p) for p in paths}
    done = {p for p in paths if now[p] == digests[p]}
    drifted = [p for p in paths if p not in done and now[p] != last[p]]
    return Plan(targets, drifted, done, {})


def _inside(path: Path, root: Path) -> bool:
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root).rstrip("/") + "/")


def undo(session: str | os.PathLike[str], to_turn: int = 0, *, force: bool = False, partial: bool = False,
         workspace: str | os.PathLike[str] = ".", store: str | os.PathLike[str] | None = None) -> list[str]:
    """Put back the files that turns after ``to_turn`` changed, as they were after ``to_turn``
    (see the module docstring for the rules).

    Args:
        session: a session file with checkpoint records (not being written by a run: its lock
            is taken, as :class:`~kimik3.agents.SessionWriter` takes it).
        to_turn: the turn to go back to (0: before the first recorded change).
        force: overwrite files that changed after the agent's last turn (a directory holding
            other files where a file must go is still refused).
        partial: restore what the checkpoints cover even when some changes are not covered
            (``uncovered``: a nested repository, ``bash`` outside git); they are logged as not
            undone. Without it, undo refuses, naming them.
        workspace: the workspace the session ran in; every record must be for it (default: the
            current directory).
        store: the copy directory of a non-git workspace (``Checkpoints(store=...)``; default
            ``<session file>.checkpoints``).

    Returns:
        The restored workspace-relative paths (removed ones included), sorted. An
        ``{"undo": {...}}`` record is appended to the session, so a later undo starts from here.

    Raises:
        SessionError: the session is being written by a run (the holder is named), or is not a
            valid session file.
        CheckpointError: a malformed record or one for another workspace (its line named), no
            checkpoints after ``to_turn``, changes the checkpoints do not cover (without
            ``partial``), a drifted file (without ``force``), a target that cannot be written
            without following a symlink or removing the user's files, git failing, a write
            failing midway (what had changed is put back first). Nothing is changed in each case.
    """
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise CheckpointError(f"workspace {workspace} is not a directory")
    later = [r for r in session_checkpoints(session, workspace=root, store=store) if r["turn"] > to_turn]
    if not later:
        raise CheckpointError(_nothing_after(session, root, store, to_turn))
    writer = SessionWriter(session)  # its lock: no run writes the session meanwhile (one that does is named)
    try:  # read again under the lock
        later = [r for r in session_checkpoints(writer.log, workspace=root, store=store) if r["turn"] > to_turn]
        if not later:  # undone meanwhile
            raise CheckpointError(_nothing_after(session, root, store, to_turn))
        restored = _undo_records(session, root, later, to_turn, force, partial)
        writer.record("undo", {"to": to_turn, "paths": restored})
    finally:
        writer.close()
    return restored


def _nothing_after(session: str | os.PathLike[str], root: Path, store: str | os.PathLike[str] | None,
                   to_turn: int) -> str:
    """Why there is nothing to undo after ``to_turn``: an undo took those changes back already
    (the session records it), or none were recorded."""
    undone = [(turn, to) for turn, to in undone_checkpoints(session, workspace=root, store=store) if turn > to_turn]
    if not undone:
        return f"{session}: no recorded changes after turn {to_turn}; nothing to undo"
    turns = sorted({turn for turn, _ in undone})
    shown = f"turn {turns[0]}" if len(turns) == 1 else f"turns {', '.join(map(str, turns))}"
    return (f"{session}: the changes recorded after turn {to_turn} ({shown}) were already undone "
            f"(the session records an undo to turn {undone[-1][1]}); nothing to undo")


def _undo_records(session: str | os.PathLike[str], root: Path, records: list[dict[str, Any]], to_turn: int,
                  force: bool, partial: bool) -> list[str]:
    if not records:
        raise CheckpointError(f"{session}: no recorded changes after turn {to_turn}; nothing to undo")
    if len({r["kind"] for r in records}) != 1:
        raise CheckpointError(f"{session}: the turns after {to_turn} mix git and copy checkpoints; undo them "
                              "one kind at a time (--to)")
    uncovered: dict[str, str] = {}
    for rec in records:
        for p, why in rec["uncovered"].items():
            uncovered[p] = f"turn {rec['turn']}: {why}"
    paths = sorted({p for r in records for p in r["changed"]})
    plan = (_git_plan if records[0]["kind"] == "git" else _copy_plan)(root, records, paths)
    uncovered.update(plan.uncovered)
    covered = [p for p in paths if p not in plan.uncovered]
    if uncovered and (not partial or not covered):
        listed = "; ".join(f"{p} ({why})" for p, why in sorted(uncovered.items()))
        rest = (f"undo with partial=True (kimik3 undo --partial) to restore only {', '.join(covered)}" if covered
                else "nothing the checkpoints recorded can be undone")
        raise CheckpointError(f"the checkpoints after turn {to_turn} do not cover: {listed}; {rest}; "
                              "nothing was changed")
    if plan.drifted and not force:
        raise CheckpointError("changed after the agent's last turn (use --force to overwrite): "
                              + ", ".join(plan.drifted))
    tree = Tree(root)
    todo = [p for p in covered if p not in plan.done]
    try:
        current = check_targets(tree, plan, todo)
    except (ToolError, OSError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise CheckpointError(f"cannot restore: {why}; nothing was changed") from None
    apply(tree, plan, todo, current)
    removed = [p for p in todo if plan.targets[p].kind == "absent"]
    parents = {"/".join(p.split("/")[:i]) for p in covered if plan.targets[p].kind != "absent"
               for i in range(1, depth(p) + 1)}
    remove_empty_parents(tree, removed, parents, plan.known_dirs)
    for p, why in sorted(uncovered.items()):
        log.warning("kimik3 undo: not undone: %s (%s)", p, why)
    return covered
