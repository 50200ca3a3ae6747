"""The interval the benchmarks give for a median of ratios (benchmarks/bench_integrations.py,
``median_interval``) is the order-statistic interval of the textbooks, with its exact
confidence."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]

pytest.importorskip("langgraph")


def _median_interval() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_integrations import median_interval
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return median_interval


@pytest.mark.parametrize(
    ("n", "low", "high"),
    # The ranks (from 1) of the 95% interval of a median in the usual tables:
    # n = 10: 2nd and 9th; 15: 4th and 12th; 20: 6th and 15th; 30: 10th and 21st.
    [(10, 2, 9), (15, 4, 12), (20, 6, 15), (30, 10, 21)],
)
def test_the_interval_is_between_the_tabled_order_statistics(n: int, low: int, high: int) -> None:
    values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose: ranks are 1..n
    found_low, median, found_high, confidence = _median_interval()(values)
    assert (found_low, found_high) == (low, high)
    assert median == (n + 1) / 2
    assert 0.95 <= confidence < 0.98


def test_the_confidence_is_the_exact_binomial_one() -> None:
    # 15 values, ranks 4 and 12: misses when 0 to 3 values fall on one side: 2 * 576 / 2**15.
    assert _median_interval()([float(v) for v in range(15)])[3] == 1 - 2 * 576 / 2**15


def test_too_few_values_give_the_whole_range_and_its_lower_confidence() -> None:
    assert _median_interval()([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 3.0, 5.0, 1 - 2 / 32)
    with pytest.raises(ValueError, match="at least one value"):
        _median_interval()([])
