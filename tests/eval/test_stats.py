"""pass@k (Chen et al. 2021), Wilson intervals and the sign test against known values."""

from __future__ import annotations

import math

import pytest

from kimik3.eval import pass_at_k, sign_test, wilson_interval


def test_pass_at_k_equals_the_combinatorial_definition() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the pass rate
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 1, 5) == 1.0
    assert pass_at_k(200, 13, 100) == pytest.approx(1 - math.comb(187, 100) / math.comb(200, 100))
    for bad in ((0, 0, 1), (3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson_interval(0, 10)[0] == 0.0 and round(wilson_interval(0, 10)[1], 4) == 0.2775
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and round(wilson_interval(10, 10)[0], 4) == 0.7225
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_sign_test_known_values() -> None:
    assert sign_test(5, 0) == pytest.approx(0.0625)  # 2 * (1/2)^5
    assert sign_test(3, 1) == pytest.approx(0.625)  # 2 * (1 + 4) / 16
    assert sign_test(0, 0) == 1.0 and sign_test(2, 2) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
