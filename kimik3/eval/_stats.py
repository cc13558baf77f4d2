"""The statistics of eval results: pass@k, Wilson score intervals, the exact sign test, medians."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

__all__ = ["median", "pass_at_k", "sign_test", "wilson_interval"]

Z95 = 1.959963984540054
"""The two-sided 95% quantile of the standard normal distribution."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` attempts of which ``c`` passed.

    pass@k is the probability that at least one of ``k`` attempts drawn without replacement from
    the ``n`` passes: ``1 - C(n - c, k) / C(n, k)``, computed as Chen et al.'s numerically stable
    product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (M. Chen et al., "Evaluating Large
    Language Models Trained on Code", 2021, arXiv:2107.03374, section 2.1 and figure 3).

    Args:
        n: attempts (>= 1).
        c: passed attempts (0 <= c <= n).
        k: the ``k`` of pass@k (1 <= k <= n).

    Returns:
        The estimate in [0, 1].

    Raises:
        ValueError: the counts are out of range.
    """
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95% by default): better behaved than the
    normal approximation at small ``n`` and rates near 0 or 1 (E. B. Wilson, "Probable
    Inference, the Law of Succession, and Statistical Inference", JASA 22, 1927).

    Returns:
        ``(low, high)``; ``(0.0, 1.0)`` when ``n`` is 0.
    """
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(worse: int, better: int) -> float:
    """The exact two-sided sign test's p-value for paired tasks: ``worse`` tasks got a lower
    pass rate, ``better`` a higher one (ties left out); under "no change" each is a fair coin.

    Returns:
        ``min(1, 2 * P(X <= min(worse, better)))`` for ``X ~ Binomial(worse + better, 1/2)``;
        1.0 when no task changed.
    """
    n = worse + better
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(worse, better) + 1)) / 2**n
    return min(1.0, 2 * tail)


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None
