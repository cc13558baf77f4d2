"""``summary.json``: the numbers of an eval, computed from its ``results.jsonl`` lines alone (so
they can always be recomputed, and compared)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ._results import AttemptResult
from ._stats import median, pass_at_k, wilson_interval

__all__ = ["summarize", "task_rows"]

TIME_STOPS = ("timeout", "time_budget")
"""Stop reasons that count as timeouts: the task's ``timeout`` cancelled the run, or its time
budget ended it."""


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def task_rows(results: Sequence[AttemptResult]) -> dict[str, dict[str, Any]]:
    """Per task (sorted by name): ``attempts``, ``passed``, ``pass_rate``, ``cost`` (summed; None
    when no attempt was priced), ``mean_turns``, ``timeouts``, ``errors``, ``loops`` (runs the loop
    breaker ended), ``tags``."""
    by_task: dict[str, list[AttemptResult]] = defaultdict(list)
    for r in results:
        by_task[r.task].append(r)
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(by_task):
        rs = by_task[name]
        costs = [r.cost for r in rs if r.cost is not None]
        passed = sum(r.passed for r in rs)
        rows[name] = {
            "attempts": len(rs),
            "passed": passed,
            "pass_rate": passed / len(rs),
            "cost": sum(costs) if costs else None,
            "mean_turns": sum(r.turns for r in rs) / len(rs),
            "timeouts": sum(r.stop_reason in TIME_STOPS for r in rs),
            "errors": sum(r.stop_reason in ("error", "setup_failed") for r in rs),
            "loops": sum(r.stop_reason == "loop_detected" for r in rs),
            "tags": sorted({t for r in rs for t in r.tags}),
        }
    return rows


def summarize(results: Sequence[AttemptResult], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary of ``results`` (see the module docstring).

    Keys: ``suite``, ``suite_digest``, ``model``, ``tools``, ``sandbox`` (from ``meta``); ``tasks``,
    ``attempts``, ``passed``, ``pass_rate``, ``pass_rate_ci95`` (Wilson), ``pass_at_k``
    (``{"1": ..., "k": ...}`` for k up to the fewest attempts any task has; the unbiased
    estimator averaged over tasks, :func:`~kimik3.eval.pass_at_k`), ``cost`` (USD, None when
    no attempt was priced), ``cost_per_pass`` (None without cost or passes), ``prompt_tokens``,
    ``cached_tokens``, ``completion_tokens``, ``cached_share`` (cached / prompt tokens of the
    attempts whose engine reports its cache; None when none does),
    ``tool_calls``, ``valid_tool_calls``, ``tool_call_validity`` (valid / made), ``timeouts``
    (:data:`TIME_STOPS`), ``check_timeouts``, ``errors``, ``loops`` (runs ended ``loop_detected``:
    the model repeated calls past every warning), ``degraded``, ``stop_reasons``
    (counts), ``ttft_p50`` (median of the attempts'), ``seconds`` (summed), ``per_task``
    (:func:`task_rows`).
    """
    meta = meta or {}
    rows = task_rows(results)
    n = len(results)
    passed = sum(r.passed for r in results)
    fewest = min((row["attempts"] for row in rows.values()), default=0)
    pass_k = {str(k): sum(pass_at_k(row["attempts"], row["passed"], k) for row in rows.values()) / len(rows)
              for k in range(1, fewest + 1)}
    costs = [r.cost for r in results if r.cost is not None]
    cost = sum(costs) if costs else None
    prompt = sum(r.prompt_tokens for r in results)
    reported = [r for r in results if r.cached_tokens is not None]  # engines that report their cache
    cached = sum(r.cached_tokens or 0 for r in reported)
    made = sum(r.tool_calls for r in results)
    valid = sum(r.valid_tool_calls for r in results)
    stops: dict[str, int] = defaultdict(int)
    for r in results:
        stops[r.stop_reason] += 1
    return {
        "suite": meta.get("suite"),
        "suite_digest": meta.get("suite_digest"),
        "model": meta.get("model"),
        "tools": meta.get("tools"),
        "sandbox": meta.get("sandbox"),
        "tasks": len(rows),
        "attempts": n,
        "passed": passed,
        "pass_rate": _ratio(passed, n),
        "pass_rate_ci95": list(wilson_interval(passed, n)) if n else None,
        "pass_at_k": pass_k,
        "cost": cost,
        "cost_per_pass": cost / passed if cost is not None and passed else None,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": sum(r.completion_tokens for r in results),
        "cached_share": _ratio(cached, sum(r.prompt_tokens for r in reported)),
        "tool_calls": made,
        "valid_tool_calls": valid,
        "tool_call_validity": _ratio(valid, made),
        "timeouts": sum(r.stop_reason in TIME_STOPS for r in results),
        "check_timeouts": sum(r.check_timed_out for r in results),
        "errors": sum(r.stop_reason in ("error", "setup_failed") for r in results),
        "loops": sum(r.stop_reason == "loop_detected" for r in results),
        "degraded": sum(r.degraded for r in results),
        "stop_reasons": dict(sorted(stops.items())),
        "ttft_p50": median(r.ttft_p50 for r in results),
        "seconds": sum(r.seconds for r in results),
        "per_task": rows,
    }
