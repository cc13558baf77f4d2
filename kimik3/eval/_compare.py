"""``kimik3 eval compare A B``: two evals' results side by side, task by task, with a regression
gate for runtime upgrades.

Both sides are read from their ``results.jsonl`` (the summaries are recomputed, never trusted).
Only tasks present in both count toward the gate. The confidence note gives each side's 95%
Wilson score interval and the exact two-sided sign test over the tasks whose pass rate changed
(:mod:`kimik3.eval._stats`): with few tasks a drop can be noise, and the note says how likely.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import EvalError
from .._text import counted
from ._results import AttemptResult, read_results
from ._stats import sign_test
from ._summary import summarize

__all__ = ["Comparison", "compare"]


@dataclass(frozen=True)
class Comparison:
    """The comparison of eval A (the baseline) with eval B.

    Attributes:
        a, b: each side's summary over the tasks both hold.
        tasks: per common task ``(name, a pass rate, b pass rate)``.
        only_a, only_b: tasks one side holds and the other does not.
        drop: ``a pass rate - b pass rate`` over the common tasks (positive: B is worse).
        max_drop: the gate's allowance.
        p_value: the sign test's over the tasks that changed.
        same_suite: both ran the same suite version (equal digests).
    """

    a: dict[str, Any]
    b: dict[str, Any]
    tasks: list[tuple[str, float, float]]
    only_a: list[str]
    only_b: list[str]
    drop: float
    max_drop: float
    p_value: float
    same_suite: bool

    @property
    def regressed(self) -> bool:
        """B's pass rate fell below A's by more than ``max_drop``."""
        return self.drop > self.max_drop + 1e-12

    @property
    def worse(self) -> list[str]:
        """Tasks whose pass rate fell."""
        return [n for n, ra, rb in self.tasks if rb < ra]

    @property
    def better(self) -> list[str]:
        """Tasks whose pass rate rose."""
        return [n for n, ra, rb in self.tasks if rb > ra]

    def confidence_note(self) -> str:
        """One sentence: both Wilson intervals and the sign test."""
        (al, ah), (bl, bh) = self.a["pass_rate_ci95"] or (0, 1), self.b["pass_rate_ci95"] or (0, 1)
        return (f"95% Wilson intervals: A {al:.1%}-{ah:.1%}, B {bl:.1%}-{bh:.1%}; exact sign test over the "
                f"{counted(len(self.worse) + len(self.better), 'task')} that changed ({len(self.worse)} worse, "
                f"{len(self.better)} better): two-sided p = {self.p_value:.3g}")

    def lines(self) -> list[str]:
        """The report printed by ``kimik3 eval compare``."""
        out = []
        if not self.same_suite:
            out.append("note: A and B ran different versions of the suite (digests differ)")
        box_a, box_b = self.a.get("sandbox"), self.b.get("sandbox")
        if box_a and box_b and box_a != box_b:
            out.append(f"note: A and B ran in different sandboxes (A {box_a}; B {box_b})")
        for name, ra, rb in self.tasks:
            if ra != rb:
                what = "fixed" if ra == 0 and rb == 1 else "broke" if ra == 1 and rb == 0 else \
                    "better" if rb > ra else "worse"
                out.append(f"{what:<6}  {name}: {ra:.0%} -> {rb:.0%}")
        out += [f"only in A: {n}" for n in self.only_a] + [f"only in B: {n}" for n in self.only_b]

        def delta(key: str, fmt: str) -> str:
            va, vb = self.a[key], self.b[key]
            shown = f"{key}: {'n/a' if va is None else format(va, fmt)} -> {'n/a' if vb is None else format(vb, fmt)}"
            if va is None or vb is None:
                return shown
            return f"{shown} ({signed(vb - va, fmt)})"

        out += [delta("pass_rate", ".1%"), delta("cost_per_pass", ".4f"), delta("cached_share", ".1%"),
                delta("tool_call_validity", ".1%"), f"timeouts: {self.a['timeouts']} -> {self.b['timeouts']}",
                self.confidence_note()]
        verdict = "REGRESSION" if self.regressed else "ok"
        out.append(f"{verdict}: B's pass rate is {signed(-self.drop, '.1%')} against A's "
                   f"(allowed drop {self.max_drop:.1%}) over {len(self.tasks)} common tasks")
        return out


def signed(value: float, fmt: str) -> str:
    """``value`` with its sign as shown in ``fmt`` (``+2.5%``, ``-0.0125``); one that shows as zero
    is ``±0.0%`` (never ``-0.0%``: a drop of 0.0004 is no drop at one decimal)."""
    text = format(abs(value), fmt)
    if text == format(0.0, fmt):
        return "±" + text
    return ("+" if value > 0 else "-") + text


def _load(path: str | Path) -> tuple[list[AttemptResult], dict[str, Any]]:
    folder = Path(path)
    file = folder / "results.jsonl" if folder.is_dir() else folder
    if not file.is_file():
        raise EvalError(f"{path} holds no results.jsonl")
    results, _ = read_results(file)
    if not results:
        raise EvalError(f"{file} holds no results")
    meta: dict[str, Any] = {}
    with_meta = file.parent / "eval.json"
    if with_meta.is_file():
        try:
            loaded = json.loads(with_meta.read_text(encoding="utf-8"))
            meta = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            meta = {}
    return results, meta


def compare(a: str | Path, b: str | Path, *, max_drop: float = 0.0) -> Comparison:
    """Compare eval ``b`` against the baseline ``a`` (output directories or results files).

    Raises:
        EvalError: a side without results, a line that is not a result, or no task in common.
    """
    ra, meta_a = _load(a)
    rb, meta_b = _load(b)
    names_a, names_b = {r.task for r in ra}, {r.task for r in rb}
    common = names_a & names_b
    if not common:
        raise EvalError(f"{a} and {b} have no task in common")
    sa = summarize([r for r in ra if r.task in common], meta_a)
    sb = summarize([r for r in rb if r.task in common], meta_b)
    tasks = [(n, sa["per_task"][n]["pass_rate"], sb["per_task"][n]["pass_rate"]) for n in sorted(common)]
    worse = sum(rb_ < ra_ for _, ra_, rb_ in tasks)
    better = sum(rb_ > ra_ for _, ra_, rb_ in tasks)
    digest_a, digest_b = meta_a.get("suite_digest"), meta_b.get("suite_digest")
    return Comparison(a=sa, b=sb, tasks=tasks, only_a=sorted(names_a - common), only_b=sorted(names_b - common),
                      drop=sa["pass_rate"] - sb["pass_rate"], max_drop=max_drop, p_value=sign_test(worse, better),
                      same_suite=digest_a is None or digest_b is None or digest_a == digest_b)
