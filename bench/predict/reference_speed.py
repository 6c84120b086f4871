"""The reference runs brought to the speed the compute was timed at.

A calibration times the compute first and its reference runs minutes later, and fits each runtime's residual as
what a reference run took beyond the modelled compute: where the machine's speed moved in between, the residual
takes the move for the runtime's. In the twelfth target sweep the small cnn's canaries ran 13-31% quicker after
its calibration than before (the compute was kept at the speed before, ``calibrate.steady_compute``), its
pipelines' residual per action came out -3.1 to -4.7 ms, and every cnn pipeline at 2 ranks was predicted 2.5-55%
short; the same configurations in nine earlier sweeps had been within 18%, most within 10%.

So each step of reference runs is timed between two canaries of its processes' layouts (``StepSpeed``) and its
step times brought back by the drift the canaries measured against the calibration's own, taken out as far as a
run's is (``canary.taken_out``): a reference run that a sweep repeats at the speed it ran at is then predicted as it
was measured. Where the two canaries disagree beyond ``DRIFT_LIMIT`` it says so and goes on with their mean: measured
again once in the thirteenth target sweep (4 of its 9 steps), the retries took the main job's calibration from 92 s
to 163 s (past its 2-minute budget) and a target sweep's from 19.5 to 28.7 minutes, and in the main job both
retries moved as far as the first tries had (22-30%).
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


def timed_between(step: Callable[[], T], canaries: Callable[[], dict[int, float]], what: str) -> tuple[T, StepSpeed]:
    """``step()`` timed between two ``canaries()`` (ms by threads), and said so where they disagree beyond
    ``DRIFT_LIMIT`` (the speed moved during it: the drift taken out is their mean)."""
    before = canaries()
    result = step()
    speed = StepSpeed(before, canaries())
    if speed.moved() > DRIFT_LIMIT:
        log.warning("the canaries moved %.0f%% across %s: the drift taken out from their mean", 100 * speed.moved(),
                    what)
    return result, speed


def at_calibration_speed(step_ms: dict[str, float], drift_of: Callable[[str], float | None]) -> dict[str, float]:
    """Reference step times (by strategy; a bubble's ``strategy:bubble``, a fraction, left as it is) divided by
    the drift of their layout taken out as a run's is; as they are where none was measured."""
    out = {}
    for name, value in step_ms.items():
        factor = None if name.endswith(":bubble") else taken_out(drift_of(name))
        out[name] = value if factor is None else value / factor
    return out
