"""Checkpoint records read back from a session file, validated before any use (see
:mod:`._undo` for the rules): a malformed record, or one for another workspace or copy directory,
is a one-line :class:`~kimik3.CheckpointError` naming its ``session:line``. The file itself is
read by :class:`~kimik3.agents.SessionLog` (its rules: a torn last line, regular files only)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .._exceptions import CheckpointError
from ..agents import SessionLog
from ._store import store_candidates

__all__ = ["session_checkpoints", "store_of", "stores_of", "undone_checkpoints"]

_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1 or SHA-256 object ids
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COPY_NAME = re.compile(r"[0-9]{1,9}\.bin")
_MAX_WHY = 500


def _bad(where: str, what: str) -> CheckpointError:
    return CheckpointError(f"{where}: invalid checkpoint record: {what}; nothing was changed")


def _relpath(value: Any, where: str, field: str, *, git_record: bool = False, dot: bool = False) -> str:
    """``value`` when it is a relative path inside the workspace, else CheckpointError."""
    if not isinstance(value, str) or not value:
        raise _bad(where, f"{field} holds {value!r:.80}, not a path")
    if dot and value == ".":
        return value
    parts = value.split("/")
    if value.startswith("/") or "\0" in value or any(p in ("", ".", "..") for p in parts):
        raise _bad(where, f"{field} holds {value!a:.120}, not a relative path inside the workspace")
    if git_record and ".git" in parts:
        raise _bad(where, f"{field} holds {value!a:.120}, inside .git")
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        raise _bad(where, f"{field} holds {value!a:.120}, not a file name") from None
    return value


def _paths(value: Any, where: str, field: str, git_record: bool) -> list[str]:
    if not isinstance(value, list):
        raise _bad(where, f"{field} is not a list")
    return [_relpath(v, where, field, git_record=git_record) for v in value]


def _check(rec: Any, where: str, root: Path | None, store: Path | tuple[Path, ...]) -> dict[str, Any]:
    """The checkpoint record ``rec`` if it is valid (see the module docstring), else
    CheckpointError naming ``where`` (``session:line``)."""
    if not isinstance(rec, dict):
        raise _bad(where, f"expected an object, got {type(rec).__name__}")
    turn, kind = rec.get("turn"), rec.get("kind")
    if type(turn) is not int or turn < 1:
        raise _bad(where, f"turn is {turn!r:.40}, not a turn number")
    if kind not in ("git", "copy"):
        raise _bad(where, f"kind is {kind!r:.40}, not 'git' or 'copy'")
    rec_root = rec.get("root")
    if not isinstance(rec_root, str) or not os.path.isabs(rec_root):
        raise _bad(where, f"root is {rec_root!r:.80}, not an absolute path")
    if root is not None and rec_root != str(root):
        raise CheckpointError(f"{where}: the checkpoint of turn {turn} is for the workspace {rec_root!a}, not "
                              f"{str(root)!a}; undo restores only the workspace it is run for (--workspace); "
                              "nothing was changed")
    changed = _paths(rec.get("changed"), where, "changed", kind == "git")
    uncovered = rec.get("uncovered", {})
    short = isinstance(uncovered, dict) and all(isinstance(v, str) and len(v) <= _MAX_WHY for v in uncovered.values())
    if not short:
        raise _bad(where, "uncovered is not an object of short texts")
    for p in uncovered:
        _relpath(p, where, "uncovered", dot=True)
    out = {"turn": turn, "kind": kind, "root": rec_root, "changed": changed, "uncovered": dict(uncovered)}
    if kind == "git":
        for key in ("before", "after"):
            if not isinstance(rec.get(key), str) or not _COMMIT.fullmatch(rec[key]):
                raise _bad(where, f"{key} is {rec.get(key)!r:.60}, not a commit id")
            out[key] = rec[key]
        return out
    files, after = rec.get("files"), rec.get("after")
    if not isinstance(files, dict) or not isinstance(after, dict) or not set(files) == set(after) == set(changed):
        raise _bad(where, "files and after must be objects with the changed paths as keys")
    for p, name in files.items():
        if name is not None and (not isinstance(name, str) or not _COPY_NAME.fullmatch(name)):
            raise _bad(where, f"files[{p!a:.80}] is {name!r:.40}, not a copy of kimik3's (N.bin)")
    for p, value in after.items():
        if value is not None and (not isinstance(value, str) or not _SHA256.fullmatch(value)):
            raise _bad(where, f"after[{p!a:.80}] is {value!r:.40}, not a SHA-256")
    copied = rec.get("copied", {})  # each copy's SHA-256 (issue 40; absent in older records)
    if not isinstance(copied, dict) or not all(isinstance(v, str) and _SHA256.fullmatch(v) for v in copied.values()):
        raise _bad(where, "copied is not an object of SHA-256 digests")
    folder = rec.get("dir")
    if not isinstance(folder, str):
        raise _bad(where, f"dir is {folder!r:.80}, not a path")
    stores = store if isinstance(store, tuple) else (store,)
    for candidate in stores:
        own = candidate / f"turn-{turn}"
        same = os.path.abspath(folder) == os.path.abspath(own)
        if not same and os.path.isdir(folder) and os.path.isdir(own):
            same = os.path.samefile(folder, own)
        if same:
            break
    else:
        raise _bad(where, f"dir is {folder!a:.160}, not kimik3's copy directory {str(stores[0] / f'turn-{turn}')!a}")
    out["dir"] = own
    out["files"], out["after"], out["copied"] = dict(files), dict(after), dict(copied)
    return out


def _read_records(session: SessionLog, root: Path | None, store: Path | tuple[Path, ...],
                  undone: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """The records in force; ``undone`` (when given) gets ``(turn, to)`` for each checkpoint an
    undo record (``{"undo": {"to": to}}``) took back."""
    records: list[dict[str, Any]] = []
    for r in session.records_of("checkpoint", "undo"):
        where = f"{session.path}:{r.line}"
        if r.kind == "checkpoint":
            records.append(_check(r.body, where, root, store))
        else:  # turns after an undo's target are undone
            to = r.body.get("to") if isinstance(r.body, dict) else None
            if type(to) is not int or to < 0:
                raise _bad(where, f"an undo record whose 'to' is {to!r:.40}, not a turn number")
            if undone is not None:
                undone += [(c["turn"], to) for c in records if c["turn"] > to]
            records = [c for c in records if c["turn"] <= to]
    return records


def session_checkpoints(session: str | os.PathLike[str] | SessionLog, *,
                        workspace: str | os.PathLike[str] | None = None,
                        store: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The checkpoint records of a session file, validated, in order, without the turns an undo
    took back.

    Args:
        session: the session file, or its log as read (:class:`~kimik3.agents.SessionLog`: the
            one reader of sessions; undo passes the log its writer read under the lock).
        workspace: when given, every record's ``root`` must be this directory.
        store: the copy directory of a non-git workspace (``Checkpoints(store=...)``; default
            ``<session file>.checkpoints``, or where that lies in the workspace, the one under
            ``${KIMIK3_HOME}``: :mod:`._store`); each copy record's ``dir`` must be in it.

    Raises:
        SessionError: the file is not a readable session (:class:`~kimik3.agents.SessionLog`).
        CheckpointError: a record is malformed (naming its line).
    """
    root = Path(workspace).resolve() if workspace is not None else None
    log = session if isinstance(session, SessionLog) else SessionLog.read(session)
    return _read_records(log, root, stores_of(log.path, store))


def undone_checkpoints(session: str | os.PathLike[str] | SessionLog, *, workspace: str | os.PathLike[str] | None = None,
                       store: str | os.PathLike[str] | None = None) -> list[tuple[int, int]]:
    """The checkpoints of a session file that an undo took back, as ``(turn, to)`` pairs in order
    (``to``: the turn that undo went back to); validated as :func:`session_checkpoints`.

    Raises:
        SessionError: the file is not a readable session (:class:`~kimik3.agents.SessionLog`).
        CheckpointError: a record is malformed (naming its line).
    """
    root = Path(workspace).resolve() if workspace is not None else None
    undone: list[tuple[int, int]] = []
    log = session if isinstance(session, SessionLog) else SessionLog.read(session)
    _read_records(log, root, stores_of(log.path, store), undone)
    return undone


def store_of(session: str | os.PathLike[str], store: str | os.PathLike[str] | None) -> Path:
    path = Path(session)
    return Path(store) if store is not None else path.with_name(path.name + ".checkpoints")


def stores_of(session: str | os.PathLike[str], store: str | os.PathLike[str] | None) -> tuple[Path, ...]:
    """The copy stores a record's ``dir`` may be in: ``store`` when given, else the two defaults
    (:func:`~._store.store_candidates`: beside the session, or under ``${KIMIK3_HOME}``)."""
    return (Path(store),) if store is not None else store_candidates(session)
