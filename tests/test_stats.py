"""Percentile bootstrap intervals, literal (bench/harness/stats.py)."""

from __future__ import annotations

import pytest

from bench.harness.stats import bootstrap_interval, with_interval


def test_the_interval_holds_the_median_and_stays_within_the_values() -> None:
    low, high = bootstrap_interval([10.0, 11.0, 12.0, 13.0, 30.0])
    assert 10.0 <= low <= 12.0 <= high <= 30.0
    assert bootstrap_interval([10.0, 11.0, 12.0, 13.0, 30.0]) == (low, high)  # seeded: the same report twice


def test_identical_values_have_no_spread_and_one_value_no_interval() -> None:
    assert bootstrap_interval([1.8, 1.8, 1.8]) == (1.8, 1.8)
    assert bootstrap_interval([1.8]) is None


def test_a_wider_spread_gives_a_wider_interval() -> None:
    narrow = bootstrap_interval([99.0, 100.0, 101.0, 100.0, 100.5])
    wide = bootstrap_interval([80.0, 100.0, 120.0, 90.0, 110.0])
    assert (wide[1] - wide[0]) > 5 * (narrow[1] - narrow[0])


@pytest.mark.parametrize(
    ("value", "low", "high", "text"),
    [(1.234, 1.1, 1.3, "1.23 [1.10, 1.30]"), (1.234, None, None, "1.23"), (float("nan"), None, None, ""),
     (1.5, float("nan"), float("nan"), "1.50")],
)
def test_with_interval(value: float, low: float | None, high: float | None, text: str) -> None:
    assert with_interval(value, low, high) == text
