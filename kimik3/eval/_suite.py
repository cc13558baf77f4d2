"""Eval suites on disk: a directory with one folder per task, each with a ``task.toml``.

::

    evals/k3-tiny/
        README.md                      (anything at the top level that is not a folder is ignored)
        first-line-notes/
            task.toml
            workspace/notes.txt        (optional: copied fresh for every attempt)
        fix-the-test/
            task.toml                  (repo = "../repos/calc.git", commit = "3f2a...")

``task.toml`` is a regular file of at most 1 MiB (a FIFO, a device or a larger file is an
:class:`~kimik3.EvalError`, never waited on or read whole). Its fields (any other key is an
error, so a typo never passes silently):

- ``instruction`` (text, required): the task given to the agent.
- ``check`` (text, required): a shell command (``bash -c``) run in the attempt's workspace after
  the agent; exit 0 = pass. It sees ``$KIMIK3_EVAL_ANSWER`` (a file holding the agent's final
  answer), ``$KIMIK3_EVAL_SESSION`` (the attempt's session file), ``$KIMIK3_EVAL_STOP_REASON``
  and ``$KIMIK3_EVAL_TASK_DIR`` (a copy of the task folder, without ``workspace/``).
- ``setup`` (text): a shell command run in the workspace before the agent (exit 0 = ready).
- ``timeout`` (seconds, default 600): the agent's run is cancelled after this; the attempt then
  fails with ``stop_reason = "timeout"``. ``budgets.seconds`` ends a run gracefully instead.
- ``check_timeout`` (seconds, default 120): the limit of ``setup`` and of ``check`` each.
- ``budgets`` (table: ``turns``, ``tokens``, ``seconds``, ``usd``): the run's
  :class:`~kimik3.Budgets`.
- ``tags`` (list of text): for selecting and grouping.
- ``repo`` + ``commit``: the workspace is a git checkout of ``commit`` from ``repo`` (a URL, or a
  path relative to the task folder) instead of ``workspace/``.

Folders whose names start with ``.`` or ``_`` are not tasks. The suite's files are only read:
each attempt works on its own copy (:mod:`kimik3.eval._workspace`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import EvalError, UserError
from .._files import open_regular, read_regular_bytes
from ..agents import Budgets

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["EvalTask", "Suite", "load_suite"]

DEFAULT_TIMEOUT = 600.0
DEFAULT_CHECK_TIMEOUT = 120.0
MAX_TASK_FILE_BYTES = 1024 * 1024
"""The largest ``task.toml`` read (bytes): a task file is a few lines; a link to ``/dev/zero`` or a
huge file is refused, never read whole (issue 40)."""
_KEYS = {"instruction", "check", "setup", "timeout", "check_timeout", "budgets", "tags", "repo", "commit"}
_BUDGET_KEYS = {"turns", "tokens", "seconds", "usd"}


@dataclass(frozen=True)
class EvalTask:
    """One task of a suite (see the module docstring for the fields).

    Attributes:
        name: the task folder's name (the task's id in results).
        path: the task folder.
        workspace: ``path / "workspace"`` when it exists (None: an empty workspace, or ``repo``).
    """

    name: str
    path: Path
    instruction: str
    check: str
    setup: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    check_timeout: float = DEFAULT_CHECK_TIMEOUT
    budgets: Budgets | None = None
    tags: tuple[str, ...] = ()
    workspace: Path | None = None
    repo: str | None = None
    commit: str | None = None


@dataclass(frozen=True)
class Suite:
    """A loaded suite.

    Attributes:
        path: its directory (resolved).
        name: the directory's name.
        tasks: the tasks, sorted by name.
        digest: sha256 of the task folders' files (relative paths and bytes; symlinks: their
            targets; the top level's own files such as a README left out): two runs scored the
            same suite when their digests are equal.
    """

    path: Path
    name: str
    tasks: tuple[EvalTask, ...]
    digest: str

    def select(self, pattern: str | None) -> list[EvalTask]:
        """The tasks whose name matches the glob ``pattern`` (all when None), or whose tags
        include it.

        Raises:
            UserError: no task matches.
        """
        if pattern is None:
            return list(self.tasks)
        chosen = [t for t in self.tasks if fnmatch.fnmatchcase(t.name, pattern) or pattern in t.tags]
        if not chosen:
            raise UserError(f"no task of {self.path} matches {pattern!r} (tasks: "
                            f"{', '.join(t.name for t in self.tasks[:8])}{', ...' if len(self.tasks) > 8 else ''})")
        return chosen


def _text(where: str, data: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise EvalError(f"{where}: `{key}` is missing")
        return None
    if not isinstance(value, str) or not value.strip():
        raise EvalError(f"{where}: `{key}` must be non-empty text, got {value!r:.60}")
    return value


def _seconds(where: str, data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10**7:
        raise EvalError(f"{where}: `{key}` must be a number of seconds > 0, got {value!r:.60}")
    return float(value)


def _budgets(where: str, data: Any) -> Budgets | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise EvalError(f"{where}: `budgets` must be a table (turns, tokens, seconds, usd)")
    unknown = sorted(set(data) - _BUDGET_KEYS)
    if unknown:
        raise EvalError(f"{where}: unknown budget {', '.join(unknown)} (known: turns, tokens, seconds, usd)")
    try:
        return Budgets(**data)
    except UserError as e:
        raise EvalError(f"{where}: {e}") from None


def _task(folder: Path) -> EvalTask:
    where = str(folder / "task.toml")
    try:
        raw = read_regular_bytes(folder / "task.toml", MAX_TASK_FILE_BYTES)  # no FIFO, device, huge file
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise EvalError(f"{folder} is a task folder without a task.toml (a leading _ in its name skips it)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise EvalError(f"{where}: cannot read it: {e}") from None
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise EvalError(f"{where}: unknown field {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise EvalError(f"{where}: `tags` must be a list of non-empty strings")
    repo, commit = _text(where, data, "repo", required=False), _text(where, data, "commit", required=False)
    workspace = folder / "workspace"
    has_workspace = workspace.is_dir() and not workspace.is_symlink()
    if workspace.exists() and not has_workspace:
        raise EvalError(f"{workspace} must be a directory (not a symlink or a file)")
    if (repo is None) != (commit is None):
        raise EvalError(f"{where}: `repo` and `commit` go together (a checkout of a fixed commit)")
    if repo is not None and has_workspace:
        raise EvalError(f"{where}: a task has either `repo` or a workspace/ folder, not both")
    return EvalTask(
        name=folder.name,
        path=folder,
        instruction=str(_text(where, data, "instruction", required=True)),
        check=str(_text(where, data, "check", required=True)),
        setup=_text(where, data, "setup", required=False),
        timeout=_seconds(where, data, "timeout", DEFAULT_TIMEOUT),
        check_timeout=_seconds(where, data, "check_timeout", DEFAULT_CHECK_TIMEOUT),
        budgets=_budgets(where, data.get("budgets")),
        tags=tuple(tags),
        workspace=workspace if has_workspace else None,
        repo=repo,
        commit=commit,
    )


def suite_digest(root: Path) -> str:
    """sha256 over the files in ``root``'s folders (tasks, and what they use, such as a folder of
    repositories; not the top level's own files, a README): relative path, kind and bytes (a
    symlink's target, not what it points to), in sorted order, without following links."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        if os.path.samefile(dirpath, root):
            filenames = []
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            if os.path.islink(full):
                h.update(b"L" + os.readlink(full).encode("utf-8", "surrogateescape") + b"\0")
            elif os.path.isfile(full):  # a regular file (a FIFO or a device is never opened)
                inner = hashlib.sha256()
                with open_regular(full) as f:  # swapped for a FIFO since: refused, not waited on
                    while chunk := f.read(1 << 20):
                        inner.update(chunk)
                h.update(b"F" + inner.digest())
    return h.hexdigest()


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """Read a suite directory (only reads).

    Args:
        path: the suite's directory.

    Returns:
        The :class:`Suite`, tasks sorted by name.

    Raises:
        EvalError: not a directory, no task, or a task folder whose ``task.toml`` is missing,
            unreadable or has a wrong or unknown field (the file and field are named).
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise EvalError(f"{path} is not a suite directory")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p.name[0] not in "._")
    tasks = tuple(_task(f) for f in folders)
    if not tasks:
        raise EvalError(f"{path} holds no task folder (a folder with a task.toml)")
    try:
        digest = suite_digest(root)
    except OSError as e:  # a file swapped for a FIFO or removed while it was hashed
        raise EvalError(f"{path}: cannot read the suite's files: {e}") from None
    return Suite(path=root, name=root.name, tasks=tasks, digest=digest)
