"""Uncertainty of a figure measured a few times: percentile bootstrap intervals.

The unit of repetition is the run (a fresh process): step times within one run hide what moves
between runs (which cores a process got, the allocator's layout, the machine's drift), and that is
what flipped rankings between two runs of the same sweep. So every interval here resamples the
per-run figures: the median over the repeats of a configuration's throughput, and the median over
rounds of its paired ratio to ``single`` measured in the same round. With n repeats the interval
can be no wider than their range, so it is a lower bound on the uncertainty when n is small.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

T = TypeVar("T")

LEVEL = 0.95
RESAMPLES = 2000


def bootstrap_interval(
    values: Sequence[T], statistic: Callable[[Sequence[T]], float] | None = None,
    level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of ``statistic`` over ``values`` (None for fewer than two).

    ``statistic`` defaults to the median; ``values`` may be any units of repetition (round indices, say)
    that a given ``statistic`` knows how to read."""
    measure = statistic if statistic is not None else cast(Callable[[Sequence[T]], float], statistics.median)
    if len(values) < 2:
        return None
    rng = random.Random(seed)  # the same records always give the same report
    estimates = sorted(measure(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - level) / 2
    return estimates[int(tail * (resamples - 1))], estimates[int((1 - tail) * (resamples - 1))]


def with_interval(value: float | None, low: float | None, high: float | None, digits: int = 2) -> str:
    """``1.23 [1.10, 1.31]``, or the value alone where there is no interval ("" for no value)."""
    if value is None or value != value:  # NaN
        return ""
    if low is None or high is None or low != low or high != high:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
