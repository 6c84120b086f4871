"""A pipeline run's actions against the ones its prediction replayed: which half of a step's error is the actions'.

A pipelined step's predicted time is its actions (each stage's calibrated blocks at the slowdown of the ranks beside
it, plus the per-action residual) and what falls between them (the schedule's waits, the bubble). Its error alone does
not say which missed. In the seventeenth target sweep (docs/predictor.md) the small cnn's 2-rank 1F1B at m = 8 was
predicted 39% long; its second stage's backwards ran 22-25 ms a micro-batch against 31-33 ms predicted while its
bubble came out within 0.04: the calibration had timed the weight-heavy blocks slower than the runs met them, and the
schedule was right. This ratio puts that beside each bubble.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Span = dict[str, Any]
"""One action of a timeline as records keep it: rank, stage, kind (F, B, I, W), microbatch, start_ms, end_ms."""


def _durations(timeline: Sequence[Span]) -> dict[tuple[Any, ...], float]:
    # records from before stages were named hold one stage a rank: its rank's
    return {(s["rank"], s.get("stage", s["rank"]), s["kind"], s["microbatch"]): s["end_ms"] - s["start_ms"]
            for s in timeline}


def actions_over_predicted(measured: Sequence[Span] | None, predicted: Sequence[Span] | None) -> float | None:
    """The time the actions both timelines hold (matched by rank, stage, kind and micro-batch) took, summed, over the
    time predicted for them: the heavy actions weigh as they weigh in the step. None where either timeline is missing
    or no action matches. Below 1: the actions ran quicker than predicted (the calibrated compute or the per-action
    residual too long), whatever the bubble did."""
    if not measured or not predicted:
        return None
    ran, replayed = _durations(measured), _durations(predicted)
    both = ran.keys() & replayed.keys()
    expected = sum(replayed[key] for key in both)
    return sum(ran[key] for key in both) / expected if expected > 0 else None
