"""The reference runs brought to the speed the compute was timed at.

A calibration times the compute first and its reference runs minutes later, and fits each runtime's residual as
what a reference run took beyond the modelled compute: where the machine's speed moved in between, the residual
takes the move for the runtime's. In the twelfth target sweep the small cnn's canaries ran 13-31% quicker after
its calibration than before (the compute was kept at the speed before, ``calibrate.steady_compute``), its
pipelines' residual per action came out -3.1 to -4.7 ms, and every cnn pipeline at 2 ranks was predicted 2.5-55%
short; the same configurations in nine earlier sweeps had been within 18%, most within 10%.

So each step of reference runs is timed between two canaries of its processes' layouts (``StepSpeed``), measured
again where the two disagree beyond ``DRIFT_LIMIT`` (the speed moved during the step: no single speed to bring it
back from), and its step times brought back by the drift the canaries measured against the calibration's own,
taken out as far as a run's is (``canary.taken_out``): a reference run that a sweep repeats at the speed it ran at
is then predicted as it was measured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from bench.predict.canary import DRIFT_LIMIT, taken_out

log = logging.getLogger(__name__)
T = TypeVar("T")

STEP_TRIES = 2
"""Measurements of one step of reference runs, at most, before the one its canaries agree on best is kept."""


@dataclass(frozen=True)
class StepSpeed:
    """The canaries of a step's layouts, by threads per process, timed just before and just after it (ms)."""

    before: dict[int, float]
    after: dict[int, float]

    def moved(self) -> float:
        """How far the speed moved during the step: the largest |after / before - 1| of its layouts."""
        return max((abs(self.after[t] / self.before[t] - 1) for t in self.before), default=0.0)

    def drift(self, threads: int, calibrated_ms: float) -> float | None:
        """The step's speed against the calibration's canary of the layout (the geometric mean of before and
        after over it: above 1 where the step ran slower); None where that layout had no canary."""
        if threads not in self.before:
            return None
        return math.sqrt(self.before[threads] * self.after[threads]) / calibrated_ms


def steady_step(step: Callable[[], T], canaries: Callable[[], dict[int, float]], what: str,
                tries: int = STEP_TRIES) -> tuple[T, StepSpeed]:
    """``step()`` timed between two ``canaries()`` (ms by threads), and again while they disagree beyond
    ``DRIFT_LIMIT``; of the tries, the one they agree on best, with its canaries."""
    tried: list[tuple[float, T, StepSpeed]] = []
    for attempt in range(tries):
        before = canaries()
        result = step()
        speed = StepSpeed(before, canaries())
        tried.append((speed.moved(), result, speed))
        if speed.moved() <= DRIFT_LIMIT:
            break
        log.warning("the canaries moved %.0f%% across %s (try %d of %d)%s", 100 * speed.moved(), what, attempt + 1,
                    tries, ": measuring it again" if attempt + 1 < tries else ": keeping the steadiest try")
    _, result, speed = min(tried, key=lambda t: t[0])
    return result, speed


def at_calibration_speed(step_ms: dict[str, float], drift_of: Callable[[str], float | None]) -> dict[str, float]:
    """Reference step times (by strategy; a bubble's ``strategy:bubble``, a fraction, left as it is) divided by
    the drift of their layout taken out as a run's is; as they are where none was measured."""
    out = {}
    for name, value in step_ms.items():
        factor = None if name.endswith(":bubble") else taken_out(drift_of(name))
        out[name] = value if factor is None else value / factor
    return out
