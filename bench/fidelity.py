"""How far to trust the numbers: the harness against hand-written loops, measured side by side.

Each comparison alternates the two sides round by round in one process (A B, B A, A B, ...),
so that drift in the machine's speed (other load, thermal state) falls on both sides alike,
and reports the ratio of their median step times.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from dataclasses import dataclass

from bench.baselines.plain_loop import plain_step_times
from bench.config import RunConfig
from bench.runner import train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Comparison:
    """One side-by-side measurement: the suite's median step time over the baseline's."""

    name: str
    suite_ms: float
    baseline_ms: float
    target: str

    @property
    def ratio(self) -> float:
        return self.suite_ms / self.baseline_ms

    def line(self) -> str:
        return (
            f"{self.name}: ratio {self.ratio:.3f} (suite {self.suite_ms:.2f} ms, "
            f"baseline {self.baseline_ms:.2f} ms per step; target {self.target})"
        )


def single_vs_plain_loop(config: RunConfig, rounds: int) -> Comparison:
    """The ``single`` strategy's median step time against the tutorial loop's, same model and batch."""
    config = dataclasses.replace(config, strategy="single", optimizer="sgd", lr=0.01)
    device = "cuda" if config.accelerator == "cuda" else "cpu"
    suite: list[float] = []
    plain: list[float] = []

    def run_suite() -> None:
        suite.extend(train(config).ranks[0].step_times_s)

    def run_plain() -> None:
        plain.extend(
            plain_step_times(config.model, config.preset, config.batch_size, config.steps, config.warmup,
                             config.seed, device)
        )  # fmt: skip

    for r in range(rounds):
        first, second = (run_suite, run_plain) if r % 2 == 0 else (run_plain, run_suite)
        first()
        second()
        log.info("round %d/%d done", r + 1, rounds)
    return Comparison(
        "single vs plain PyTorch loop",
        statistics.median(suite) * 1e3,
        statistics.median(plain) * 1e3,
        "within 2%",
    )
