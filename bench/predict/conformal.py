"""A prediction interval that holds what it says: the calibration's spread, widened to the errors the same
calibration has made on the runs a sweep already measured (split conformal prediction, run online).

The calibration's own spread is how much its repeats of one timing moved inside one process: 2-8% here.
The held-out errors of the runs it then predicted were larger (a median of 6.5% over the quiet sweep of
62 configurations, up to 27%: the model's own error and the machine between the calibration and the run),
so 12 of those 62 measured medians fell inside intervals made from the spread alone. A sweep measures
each run right after predicting it; the next prediction's interval takes the ``COVERAGE`` quantile of the
earlier runs' errors as its half-width where that is wider than the spread. An error is the factor
between the two, max(measured / predicted, predicted / measured) - 1, and the interval runs from the
prediction over (1 + half-width) to the prediction times it: a step predicted at half its measured time
misses by as much as one predicted at twice it, and the interval's low end stays above zero. With n
earlier scores the quantile is the ceil((n + 1) * COVERAGE)-th smallest, which holds a later error with
probability at least ``COVERAGE`` when the errors are exchangeable (Vovk et al., *Algorithmic Learning in
a Random World*, 2005; Angelopoulos & Bates, *A Gentle Introduction to Conformal Prediction*, 2021);
until there are enough of them, the spread alone, and the basis says so.

The errors are taken by strategy where a strategy has enough of its own (Mondrian conformal prediction, which
conditions the quantile on a category: Vovk et al., ch. 4): a calibration's pipelines and its data-parallel runs
miss by different amounts, and a quantile pooled over both is too narrow for the one and too wide for the other.
Re-scored in record order over the target sweep (92 held-out configurations, 276 runs): 203 runs inside with the
pooled quantile, 215 with each strategy's own; over nine main jobs (24 runs each), 173 and 174.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

COVERAGE = 0.8
"""The share of later measured steps a sweep's prediction intervals are built to hold."""


@dataclass(frozen=True)
class Interval:
    """A predicted step time's interval and what its half-width rests on."""

    low_ms: float
    high_ms: float
    basis: str
    """One line: the calibration's spread, or the held-out errors that widened it, with their count."""


@dataclass(frozen=True)
class HeldOutErrors:
    """The errors an interval is widened to, and whose they are (said in its basis)."""

    scores: Sequence[float]
    whose: str = "this calibration"


def held_out_errors(records: Iterable[dict[str, Any]], source: str, strategy: str) -> HeldOutErrors:
    """What a prediction of ``strategy`` from ``source`` takes its interval from: that strategy's held-out errors
    where they are enough for the quantile, else every strategy's of the calibration, else, for a calibration's
    first runs, those of every calibration whose runs the results file holds (another model's, as a sweep
    calibrates each: less alike than the calibration's own, more than its spread, which held 5 of the 12 first runs
    of the third target sweep; re-scored in record order over the three target sweeps, 11 more of 828 runs
    inside, none fewer)."""
    records = list(records)
    own = held_out_scores(records, source, strategy)
    if conformal_half_width(own) is not None:
        return HeldOutErrors(own, f"this calibration's {strategy} runs")
    calibrations = held_out_scores(records, source)
    if conformal_half_width(calibrations) is not None:
        return HeldOutErrors(calibrations)
    sweeps = held_out_scores(records, None)
    if conformal_half_width(sweeps) is not None:
        return HeldOutErrors(sweeps, "every calibration's runs in the results file")
    return HeldOutErrors(calibrations)


def held_out_scores(records: Iterable[dict[str, Any]], source: str | None,
                    strategy: str | None = None) -> list[float]:
    """The error factor (``factor_error``) of every quiet, successful run (of ``strategy``; None: of any)
    predicted from ``source`` (a calibration; None: any) whose own timings did not enter it: the errors a later
    prediction of the same calibration may make."""
    scores = []
    for record in records:
        prediction = record.get("prediction")
        if (not isinstance(prediction, dict) or record.get("status") != "ok" or record.get("disturbed")
                or prediction.get("fitted") or source not in (None, prediction.get("compute_source"))
                or strategy not in (None, record.get("strategy"))):
            continue
        predicted, measured = prediction.get("predicted_step_time_ms"), record.get("step_time_ms_median")
        if predicted and measured:
            scores.append(factor_error(measured, predicted))
    return scores


def factor_error(measured: float, predicted: float) -> float:
    """How many times over the prediction missed, less one: 0.25 for a step measured at 1.25 or 0.8 times its
    prediction."""
    return max(measured / predicted, predicted / measured) - 1


def conformal_half_width(scores: Sequence[float], coverage: float = COVERAGE) -> float | None:
    """The ceil((n + 1) * coverage)-th smallest of n scores; None where n is too few for that rank."""
    rank = math.ceil((len(scores) + 1) * coverage)
    return sorted(scores)[rank - 1] if rank <= len(scores) else None


def interval(step_ms: float, spread: float, held_out: HeldOutErrors | None = None,
             coverage: float = COVERAGE) -> Interval:
    """``step_ms`` over and times (1 + the wider of the calibration's ``spread`` and the conformal half-width of
    the ``held_out`` errors); None where no run has been measured against it (``bench predict``)."""
    scores, whose = (None, "") if held_out is None else (held_out.scores, held_out.whose)
    spread_basis = f"the calibration's spread ({spread:.1%})"
    conformal = None if scores is None else conformal_half_width(scores, coverage)
    if scores is None:
        half, basis = spread, spread_basis
    elif conformal is None:
        half, basis = spread, f"{spread_basis}; {len(scores)} earlier held-out error(s), too few for its quantile"
    elif conformal <= spread:
        half, basis = spread, f"{spread_basis}, wider than the {coverage:.0%} quantile of {len(scores)} earlier " \
                              f"held-out errors ({conformal:.1%})"
    else:
        half, basis = conformal, (f"the {coverage:.0%} quantile of {len(scores)} earlier held-out errors of {whose} "
                                  f"({conformal:.1%}), wider than its spread ({spread:.1%})")
    return Interval(step_ms / (1 + half), step_ms * (1 + half), basis)
