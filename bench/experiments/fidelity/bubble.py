"""A pipeline's measured bubble against its schedule's theory: the rounds its workers send back, and the check
held to the theory where the schedule has one and there are enough micro-batches for it to matter.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bench.experiments.fidelity.results import FigureAndLine, Interval, Setup, figure_text, interval_text, settled
from bench.harness.stats import bootstrap_interval

BUBBLE_TOLERANCE = 0.05
"""How far the measured bubble fraction may be from the schedule's theoretical one."""
BUBBLE_MICROBATCHES_PER_STAGE = 4
"""The bubble is held to its theory only where m >= 4p: GPipe (Huang et al. 2019) finds the bubble
negligible there, which is where pipelines are run; with fewer micro-batches it is a design choice."""


@dataclass(frozen=True)
class PipelineRound:
    """What rank 0 of the pp workers sends back for one training run."""

    step_times_ms: list[float]
    measured_bubble: float | None
    theoretical_bubble: float | None
    """None for zero-bubble schedules, whose bubble has no closed form."""


@dataclass(frozen=True)
class BubbleCheck(FigureAndLine):
    """The pipeline's measured bubble fraction (median over rounds) against its schedule's theoretical one."""

    name: str
    setup: Setup
    schedule: str
    microbatches: int
    measured: float
    theoretical: float
    pp_ms: float
    tolerance: float = BUBBLE_TOLERANCE
    interval: Interval | None = None
    """The measured bubble's interval over the rounds; None from one round."""

    @property
    def difference(self) -> float:
        return self.measured - self.theoretical

    @property
    def settled(self) -> bool | None:
        """False where the measured bubble's interval crosses a bound of the target band."""
        return settled(self.interval, self.theoretical - self.tolerance, self.theoretical + self.tolerance)

    @property
    def target(self) -> str:
        return f"within {self.tolerance:g}"

    @property
    def met(self) -> bool:
        return abs(self.difference) <= self.tolerance

    @property
    def figure(self) -> str:
        return self._figure()

    def line(self) -> str:
        return f"{self.name}: measured {self._figure(self.target)}"

    def _figure(self, target: str | None = None) -> str:
        headline = f"bubble {self.measured:.3f}{interval_text(self.interval)} vs theoretical {self.theoretical:.3f}"
        return figure_text(headline, f"difference {self.difference:+.3f}", target)

    def record_fields(self) -> dict[str, Any]:
        return {"comparison": "pp-bubble", "name": self.name, "measured_bubble_fraction": self.measured,
                "theoretical_bubble_fraction": self.theoretical, "bubble_difference": self.difference,
                "measured_bubble_interval": self.interval, "settled": self.settled,
                "suite_ms": self.pp_ms, "schedule": self.schedule, "microbatches": self.microbatches,
                "target": self.target, "met": self.met, **self.setup.record_fields()}


def bubble_checks(rounds: dict[int, list[PipelineRound]], setup: Setup, schedule: str) -> list[BubbleCheck]:
    """One check per micro-batch count m >= 4p that has a theoretical bubble, from its rounds' records."""
    checks = []
    for m, runs in sorted(rounds.items()):
        measured = [r.measured_bubble for r in runs if r.measured_bubble is not None]
        theoretical = runs[0].theoretical_bubble if runs else None
        if m < BUBBLE_MICROBATCHES_PER_STAGE * setup.devices or theoretical is None or not measured:
            continue
        pp_ms = statistics.median(t for r in runs for t in r.step_times_ms)
        name = f"pp bubble, {setup.devices} stages, M={m}, {schedule}"
        checks.append(BubbleCheck(name, setup, schedule, m, statistics.median(measured), theoretical, pp_ms,
                                  interval=bootstrap_interval(measured)))
    return checks
