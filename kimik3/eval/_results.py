"""An eval's output directory: ``eval.json`` (what was run), ``results.jsonl`` (one line per
attempt, appended as each ends) and the attempts' sessions; resumable.

Each result is one ``write`` of one whole line to a file opened with ``O_APPEND``, so a line is on
disk complete or (killed mid-write) torn at the very end: a torn last line is cut off when the
directory is opened again, every complete line is kept. The eval holds an exclusive ``flock`` on
``results.jsonl`` while it runs: a second eval of the same directory is refused, not mixed in.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .._exceptions import EvalError

__all__ = ["AttemptResult", "ResultsDir", "read_results"]

EVAL_VERSION = 1
_SAME = ("suite_digest", "tools", "settings", "max_turns", "max_usd", "pricing", "sandbox_policy")
"""Fields of ``eval.json`` a continued directory must share with the run that made it."""


@dataclass
class AttemptResult:
    """One line of ``results.jsonl``: one attempt of one task.

    Attributes:
        task, attempt: the task's name and the attempt's number (1-based).
        passed: the run ended (not ``timeout`` / ``error`` / ``setup_failed``) and the check
            exited 0.
        stop_reason: the run's :data:`~kimik3.agents.StopReason`, or ``timeout`` (the task's
            ``timeout`` cancelled it), ``error`` (it raised; see :attr:`error`) or
            ``setup_failed``.
        turns, prompt_tokens, completion_tokens: summed over the model calls.
        cached_tokens: prompt tokens served from the engine's prefix cache (None: the engine
            does not report them).
        cost: USD (None without prices). seconds: the agent's wall time.
        ttft_p50: the median time to first token of its model calls (s).
        failed_calls, cut_calls, dropped_calls, degraded: as :class:`~kimik3.RunResult`.
        tool_calls, valid_tool_calls: the calls the model made, and those valid against the
            declared schemas (:mod:`kimik3.eval._validity`); cut and dropped calls count as
            made and invalid.
        session: the session file, relative to the output directory.
        check_exit: the check's exit status (None: not run, or timed out).
        check_timed_out: the check overran ``check_timeout``.
        check_output: the tail of the check's (or failed setup's) output.
        error: ``Type: message`` of the error that ended the attempt.
        tags: the task's tags.
    """

    task: str
    attempt: int
    passed: bool
    stop_reason: str
    turns: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    completion_tokens: int = 0
    cost: float | None = None
    seconds: float = 0.0
    ttft_p50: float | None = None
    failed_calls: int = 0
    cut_calls: int = 0
    dropped_calls: int = 0
    degraded: bool = False
    session: str | None = None
    tool_calls: int = 0
    valid_tool_calls: int = 0
    check_exit: int | None = None
    check_timed_out: bool = False
    check_output: str = ""
    error: str | None = None
    tags: list[str] = field(default_factory=list)

    def to_line(self) -> bytes:
        """The JSON line (UTF-8, ending with a newline)."""
        return (json.dumps(asdict(self), ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, where: str) -> AttemptResult:
        """A result read back; EvalError (naming ``where``) when a field is missing or of the
        wrong type."""
        if not isinstance(data, dict):
            raise EvalError(f"{where}: not a result object")
        kinds: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "bool": bool, "float": (int, float),
                                                     "list[str]": list}
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                if f.name in ("task", "attempt", "passed", "stop_reason"):
                    raise EvalError(f"{where}: `{f.name}` is missing")
                continue
            value, kind = data[f.name], str(f.type)
            optional = kind.endswith(" | None")
            base = kinds[kind.removesuffix(" | None")]
            bad = isinstance(value, bool) and base is not bool
            if (value is None and not optional) or (value is not None and (bad or not isinstance(value, base))):
                raise EvalError(f"{where}: `{f.name}` must be {kind}, got {value!r:.60}")
            if isinstance(value, list) and not all(isinstance(v, str) for v in value):
                raise EvalError(f"{where}: `{f.name}` must be a list of strings")
            if isinstance(value, float) and not math.isfinite(value):
                raise EvalError(f"{where}: `{f.name}` must be finite, got {value!r}")
            values[f.name] = value
        if values["attempt"] < 1 or not values["task"]:
            raise EvalError(f"{where}: a result needs a task name and an attempt >= 1")
        return cls(**values)


def read_results(path: Path) -> tuple[list[AttemptResult], int]:
    """The results in ``path`` and the byte length of its complete lines (a torn last line, a
    crash's, is left out).

    Raises:
        EvalError: a complete line that is not a result (its number is named), or two lines for
            the same attempt.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as e:
        raise EvalError(f"cannot read {path}: {e}") from None
    keep = data.rfind(b"\n") + 1
    results: list[AttemptResult] = []
    seen: set[tuple[str, int]] = set()
    for number, raw in enumerate(data[:keep].split(b"\n")[:-1], start=1):
        where = f"{path}:{number}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise EvalError(f"{where}: not a JSON line: {e}") from None
        result = AttemptResult.from_json(record, where)
        if (result.task, result.attempt) in seen:
            raise EvalError(f"{where}: a second result for {result.task} attempt {result.attempt}")
        seen.add((result.task, result.attempt))
        results.append(result)
    return results, keep


class ResultsDir:
    """An eval's output directory, opened for one run (see the module docstring).

    Args:
        path: the directory (created, with its parents, when missing).
        meta: what this run runs (``suite``, ``suite_digest``, ``tools``, ``settings``, ...),
            written to ``eval.json`` in a new directory, checked against it in an existing one.

    Attributes:
        results: the results already there (this run skips their attempts).

    Raises:
        EvalError: the directory was made for another suite (digest) or other options (named),
            another eval is writing it, or ``results.jsonl`` has a line that is not a result.
    """

    def __init__(self, path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EvalError(f"cannot make the output directory {self.path}: {e}") from None
        self.results_path = self.path / "results.jsonl"
        self._fd = os.open(self.results_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise EvalError(f"{self.path} is being written by another eval") from None
                raise
            self.meta = self._check_meta(meta)
            self.results, keep = read_results(self.results_path)
            if keep < os.fstat(self._fd).st_size:
                os.ftruncate(self._fd, keep)  # the torn last line of a crash
        except BaseException:
            os.close(self._fd)
            raise

    def _check_meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        file = self.path / "eval.json"
        if file.exists():
            try:
                old = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise EvalError(f"{file} cannot be read: {e}") from None
            if not isinstance(old, dict) or old.get("kimik3_eval") != EVAL_VERSION:
                raise EvalError(f"{file} is not a kimik3 eval record (version {EVAL_VERSION})")
            for key in _SAME:
                if old.get(key) != meta.get(key):
                    raise EvalError(f"{self.path} holds results of another run ({key}: {old.get(key)!r:.80} there, "
                                    f"{meta.get(key)!r:.80} now); continue it with the same suite and options, "
                                    "or use a new --out")
            if old.get("model") and meta.get("model") and old["model"] != meta["model"]:
                raise EvalError(f"{self.path} holds results of model {old['model']!r:.80}, not {meta['model']!r:.80}; "
                                "use a new --out")
            return old
        record = {"kimik3_eval": EVAL_VERSION, "created": int(time.time()), **meta}
        tmp = file.with_name(file.name + ".tmp")
        tmp.write_text(json.dumps(record, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, file)
        return record

    def session_path(self, task: str, attempt: int) -> Path:
        """Where an attempt's session goes: ``sessions/<task>/<attempt>.jsonl`` (made ready:
        a session an interrupted attempt left there is renamed ``<attempt>.interrupted-N.jsonl``,
        never overwritten nor continued)."""
        folder = self.path / "sessions" / task
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{attempt}.jsonl"
        n = 1
        while path.exists() and path.stat().st_size > 0:
            aside = folder / f"{attempt}.interrupted-{n}.jsonl"
            if not aside.exists():
                os.replace(path, aside)
            n += 1
        return path

    def append(self, result: AttemptResult) -> None:
        """Write ``result`` as one line (one ``write``; looped only if the kernel wrote part)."""
        view = memoryview(result.to_line())
        while view:
            view = view[os.write(self._fd, view):]
        self.results.append(result)

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ResultsDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
