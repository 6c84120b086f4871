"""What every fidelity comparison shares: the setup it ran on, how its two sides take turns, the
protocol its result follows, and the record it becomes."""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bench.harness.config import RunConfig
from bench.harness.records import RECORD_VERSION
from bench.harness.stats import bootstrap_interval
from strategies.devices import is_emulated

T = TypeVar("T")


@dataclass(frozen=True)
class Setup:
    """What a comparison ran on, as its record names it."""

    model: str
    preset: str
    devices: int
    accelerator: str
    global_batch_size: int

    def record_fields(self) -> dict[str, Any]:
        return {"model": self.model, "preset": self.preset, "device_count": self.devices,
                "accelerator": self.accelerator, "global_batch_size": self.global_batch_size,
                "emulated": is_emulated(self.accelerator, self.devices)}


class FidelityResult(Protocol):
    """One measured figure of ``bench fidelity``, its target and whether it met it."""

    @property
    def name(self) -> str:
        """What was compared, as the report's row names it: ``single vs plain PyTorch loop``."""
        ...

    @property
    def setup(self) -> Setup: ...

    @property
    def target(self) -> str:
        """The target in words: ``within 2%``."""
        ...

    @property
    def met(self) -> bool | None:
        """None for a figure shown for information, held to no target."""
        ...

    @property
    def figure(self) -> str:
        """The measured figure, as the report's ``measured`` column shows it."""
        ...

    def line(self) -> str:
        """What ``bench fidelity`` prints: name, figure and target."""
        ...

    def record_fields(self) -> dict[str, Any]:
        """The figures with their units in the field names, ``target``, ``met`` and the setup's fields."""
        ...


class FigureAndLine:
    """A result's two texts from its one ``_figure``: the report's ``figure``, and the printed ``line``
    (which adds the name and the target), so that the two cannot drift apart."""

    name: str

    @property
    def target(self) -> str:
        raise NotImplementedError

    def _figure(self, target: str | None = None) -> str:
        raise NotImplementedError

    @property
    def figure(self) -> str:
        return self._figure()

    def line(self) -> str:
        return f"{self.name}: {self._figure(self.target)}"


def figure_text(headline: str, detail: str, target: str | None = None) -> str:
    """``headline (detail)``, or ``headline (detail; target T)`` for the printed line: one text for both."""
    return f"{headline} ({detail}; target {target})" if target is not None else f"{headline} ({detail})"


def alternate(sides: Sequence[T], rounds: int) -> list[tuple[T, ...]]:
    """Each round's order of the sides: A B, B A, A B, ...

    Alternating keeps drift in the machine's speed (other load, thermal state) from falling on one
    side only, and neither side always runs on the caches the other warmed."""
    return [tuple(sides) if r % 2 == 0 else tuple(reversed(sides)) for r in range(rounds)]


Interval = tuple[float, float]
"""A 95% percentile-bootstrap interval (bench/harness/stats.py) of a figure, over the rounds that made it."""


def pooled_ratio(
    numerator: Sequence[Sequence[float]], denominator: Sequence[Sequence[float]]
) -> tuple[float, Interval | None]:
    """median(every numerator time) / median(every denominator time), and the interval of that ratio
    over rounds (None for one round).

    Each round's two lists ran back to back, so rounds are resampled in pairs: the interval says how
    much the figure moves with what changes between rounds (drift, other load), which the steps of
    one round cannot show."""
    if len(numerator) != len(denominator):
        raise ValueError(f"{len(numerator)} rounds against {len(denominator)}: the two sides must pair up")

    def ratio(rounds: Sequence[int]) -> float:
        top = [t for r in rounds for t in numerator[r]]
        bottom = [t for r in rounds for t in denominator[r]]
        return statistics.median(top) / statistics.median(bottom)

    return ratio(range(len(numerator))), bootstrap_interval(list(range(len(numerator))), ratio)


def interval_text(interval: Interval | None, digits: int = 3) -> str:
    """`` [0.981, 1.023]`` after a figure, or nothing without an interval."""
    return "" if interval is None else f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def settled(interval: Interval | None, low: float, high: float) -> bool | None:
    """Whether the interval lies wholly inside or wholly outside the target band [low, high]: False
    where it crosses a bound (the rounds do not decide the verdict), None without an interval."""
    if interval is None:
        return None
    inside = low <= interval[0] and interval[1] <= high
    outside = interval[1] < low or interval[0] > high
    return inside or outside


def fidelity_record(
    result: FidelityResult, config: RunConfig, rounds: int, env: dict[str, Any]
) -> dict[str, Any]:
    """The record of one comparison: its figures, target and verdict, what it ran on, and how often."""
    return {
        "record_version": RECORD_VERSION,
        "kind": "fidelity",
        "status": "ok",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **result.record_fields(),
        "figure": result.figure,
        "rounds": rounds,
        "steps_per_round": config.measure.steps,
        "warmup_steps": config.run.warmup,
        "env": env,
    }
