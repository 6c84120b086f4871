"""``bench plan --measure``: the plan checked where it runs. The chosen candidates run with repeats on the devices at
hand, as ``bench sweep`` runs them (fresh processes round by round, resumable, disturbed runs marked and run again),
and the measured order is held against the predicted one."""

from __future__ import annotations

import dataclasses
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.experiments.grid import PlannedRun, SweepConfig, run_key
from bench.experiments.planner.search import Candidate
from bench.experiments.sweep import execute
from bench.experiments.verify import verify_run
from bench.harness.config import RunConfig
from bench.harness.records import read_records
from bench.harness.stats import bootstrap_interval


@dataclass(frozen=True)
class Measured:
    """One candidate's predicted and measured throughput (undisturbed repeats only)."""

    candidate: Candidate
    predicted_rank: int
    samples_per_s: list[float]
    verdict: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``bench verify``'s on the candidate's class of run (``verify.verify_run``); empty if not checked."""

    @property
    def verified(self) -> str:
        passed = self.verdict.get("passed", "unchecked")
        return {True: "pass", False: "FAIL", None: "skipped", "unchecked": "not checked"}[passed]

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples_per_s) if self.samples_per_s else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95% bootstrap interval of the median over the repeats (the report's)."""
        return bootstrap_interval(self.samples_per_s)


def measure(chosen: list[Candidate], out: Path, repeats: int, steps: int, warmup: int,
            timeout_s: float, verify_steps: int = 3) -> list[Measured]:
    """Runs every chosen candidate ``repeats`` times into ``out`` (a sweep's file: rows already there count), and
    ``bench verify``'s check of each against ``single`` (``verify_steps`` 0: none)."""
    configs = [c.config.with_flags(out=str(out), steps=steps, warmup=warmup) for c in chosen]
    sweep = SweepConfig(strategies=tuple({c.strategy for c in configs}), models=(configs[0].workload.model,),
                        devices=(configs[0].run.devices,), base=configs[0], repeats=repeats, run_timeout_s=timeout_s)
    runs = [PlannedRun(c.with_flags(repeat=r)) for r in range(repeats) for c in configs]
    execute(sweep, runs)
    verdicts = [verify_run(c.config, verify_steps, timeout_s) if verify_steps else {}
                for c in tqdm(chosen, desc="verify", unit="candidate", file=sys.stderr, disable=None)]
    return [Measured(candidate, rank, _samples_per_s(out, config), verdict)
            for rank, (candidate, config, verdict) in enumerate(zip(chosen, configs, verdicts, strict=True), start=1)]


def _samples_per_s(out: Path, config: RunConfig) -> list[float]:
    """Every undisturbed repeat's samples/s of ``config`` in ``out``."""
    wanted = _any_repeat(config.as_dict())
    found = []
    for record in read_records(out)[0]:
        ran = record.get("config")
        if isinstance(ran, dict) and _any_repeat(ran) == wanted and record.get("status") == "ok" \
                and not record.get("disturbed"):
            found.append(float(str(record["samples_per_s"])))
    return found


def _any_repeat(config: dict[str, Any]) -> str:
    return run_key({k: v for k, v in config.items() if k != "repeat"})


def rank_correlation(predicted: list[float], measured: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None for fewer than two pairs or no spread."""
    if len(predicted) < 2:
        return None
    a, b = _ranks(predicted), _ranks(measured)
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True))
    spread = (sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b)) ** 0.5
    return cov / spread if spread else None


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def first_pick_in_measured_tie(measured: list[Measured]) -> bool | None:
    """Whether the predicted first's interval reaches the measured best's (they cannot be told apart), or
    None where either has fewer than two undisturbed repeats."""
    ran = [m for m in measured if m.median is not None]
    if not ran or measured[0].median is None:
        return None
    best = max(ran, key=lambda m: m.median or 0.0)
    if best is measured[0]:
        return True
    mine, theirs = measured[0].interval, best.interval
    if mine is None or theirs is None:
        return None
    return mine[1] >= theirs[0]
