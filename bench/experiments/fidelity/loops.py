"""The harness against hand-written loops: ``single`` against the tutorial's plain loop, ``ddp`` and
``fsdp`` on 2 processes against the DDP and FSDP2 tutorials' scripts, each reported as the ratio of
median step times."""

from __future__ import annotations

import functools
import logging
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bench.experiments.baselines.plain_ddp import plain_ddp_step_times
from bench.experiments.baselines.plain_loop import plain_step_times
from bench.experiments.fidelity.results import (
    FigureAndLine,
    Interval,
    Setup,
    alternate,
    figure_text,
    interval_text,
    pooled_ratio,
    settled,
)
from bench.harness.config import RunConfig, resolve
from bench.harness.launch import threads_per_process
from bench.harness.ranks import become_rank, start_ranks
from bench.harness.runner import step_times_ms, train
from strategies import REFERENCE
from strategies.ddp import DistributedDataParallelStrategy
from strategies.distributed import gather_objects, process_group, torchrun_topology
from strategies.fsdp import FSDPStrategy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Comparison(FigureAndLine):
    """One side-by-side measurement: the suite's median step time over the baseline's."""

    comparison: str
    """A stable id for the record: ``single-vs-plain-loop``, ``ddp-vs-plain-ddp``, ``fsdp-vs-plain-fsdp``."""
    name: str
    setup: Setup
    suite_ms: float
    baseline_ms: float
    tolerance: float
    """How far from 1 the ratio may be: 0.02 is "within 2%"."""
    interval: Interval | None = None
    """The ratio's interval over the rounds (``pooled_ratio``); None from one round."""

    @classmethod
    def from_rounds(
        cls, comparison: str, name: str, setup: Setup, suite: list[list[float]], plain: list[list[float]],
        tolerance: float,
    ) -> Comparison:
        """From each round's seconds per step of the two sides."""
        _, interval = pooled_ratio(suite, plain)
        suite_ms = statistics.median(t for r in suite for t in r) * 1e3
        plain_ms = statistics.median(t for r in plain for t in r) * 1e3
        return cls(comparison, name, setup, suite_ms, plain_ms, tolerance, interval)

    @property
    def ratio(self) -> float:
        return self.suite_ms / self.baseline_ms

    @property
    def settled(self) -> bool | None:
        """False where the ratio's interval crosses the target's bounds: more rounds would be needed to say."""
        return settled(self.interval, 1 - self.tolerance, 1 + self.tolerance)

    @property
    def target(self) -> str:
        return f"within {self.tolerance:.0%}"

    @property
    def met(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance

    def _figure(self, target: str | None = None) -> str:
        detail = f"suite {self.suite_ms:.2f} ms, baseline {self.baseline_ms:.2f} ms per step"
        return figure_text(f"ratio {self.ratio:.3f}{interval_text(self.interval)}", detail, target)

    def record_fields(self) -> dict[str, Any]:
        return {"comparison": self.comparison, "name": self.name, "ratio": self.ratio, "suite_ms": self.suite_ms,
                "baseline_ms": self.baseline_ms, "ratio_interval": self.interval, "target": self.target,
                "met": self.met, "settled": self.settled,
                **self.setup.record_fields()}


def _alternated(
    measure: dict[str, Callable[[], list[float]]], rounds: int, progress: bool = True
) -> dict[str, list[list[float]]]:
    """Each side's step times in each of ``rounds`` rounds, the sides alternating A B, B A, ..."""
    times: dict[str, list[list[float]]] = {side: [] for side in measure}
    for r, order in enumerate(alternate(list(measure), rounds)):
        for side in order:
            times[side].append(measure[side]())
        if progress:
            log.info("round %d/%d done", r + 1, rounds)
    return times


def single_vs_plain_loop(config: RunConfig, rounds: int) -> Comparison:
    """The ``single`` strategy's median step time against the tutorial loop's, same model and batch."""
    config = config.with_flags(strategy=REFERENCE, optimizer="sgd", lr=0.01)
    batch_size = config.run.batch_size
    assert batch_size is not None, "config comes resolved (resolve fills in batch_size)"
    device = "cuda" if config.run.accelerator == "cuda" else "cpu"
    times = _alternated({
        "suite": lambda: train(config).ranks[0].step_times_s,
        "plain": lambda: plain_step_times(config.workload.model, config.workload.preset, batch_size,
                                          config.measure.steps,
                                          config.run.warmup, config.workload.seed, device),
    }, rounds)
    return Comparison.from_rounds(
        "single-vs-plain-loop",
        "single vs plain PyTorch loop",
        Setup(config.workload.model, config.workload.preset, 1, config.run.accelerator, batch_size),
        times["suite"],
        times["plain"],
        tolerance=0.02,
    )


PROCESSES = 2
"""Ranks of the ddp and fsdp comparisons: each suite strategy and its tutorial script on 2 processes."""

PlainStepTimes = Callable[[str, str, int, int, int, int, str], list[float]]
"""A hand-written script: (model, preset, global batch, steps, warmup, seed, device) -> seconds per timed step."""


def ddp_fidelity_config(config: RunConfig) -> RunConfig | None:
    """``config`` as the ddp comparison runs it, validated (ConfigError on a batch 2 does not divide);
    None where this machine cannot run it (fewer than 2 GPUs on CUDA)."""
    return _two_process_config(config, DistributedDataParallelStrategy.name)


def fsdp_fidelity_config(config: RunConfig) -> RunConfig | None:
    """``config`` as the fsdp comparison runs it, as ``ddp_fidelity_config`` does for ddp. Its
    ``reshard_after_forward`` is handed to the plain script too, so both run the same ZeRO stage."""
    return _two_process_config(config, FSDPStrategy.name)


def _two_process_config(config: RunConfig, strategy: str) -> RunConfig | None:
    if config.run.accelerator == "cuda" and torch.cuda.device_count() < PROCESSES:
        log.warning("%s comparison skipped: it needs %d GPUs", strategy, PROCESSES)
        return None
    return resolve(config.with_flags(strategy=strategy, devices=PROCESSES, optimizer="sgd", lr=0.01))


def ddp_vs_plain_ddp(config: RunConfig, rounds: int) -> Comparison:
    """The ``ddp`` strategy on 2 processes against the DDP tutorial's script, same model and global batch.

    ``config`` comes from ``ddp_fidelity_config``. Both sides run in the same 2 processes and
    process group, alternating round by round; each side's step time is the slowest rank's per
    step, as in the suite's records.
    """
    assert config.run.batch_size is not None, "ddp_fidelity_config resolves config (resolve fills in batch_size)"
    suite, plain = _side_by_side(config, rounds, plain_ddp_step_times)
    return Comparison.from_rounds(
        "ddp-vs-plain-ddp",
        f"ddp vs plain DDP script ({PROCESSES} processes)",
        Setup(config.workload.model, config.workload.preset, PROCESSES, config.run.accelerator, config.run.batch_size),
        suite,
        plain,
        tolerance=0.03,
    )


def fsdp_vs_plain_fsdp(config: RunConfig, rounds: int) -> Comparison:
    """The ``fsdp`` strategy on 2 processes against the FSDP2 tutorial's script, same model, global
    batch and resharding; measured as ``ddp_vs_plain_ddp`` is, ``config`` from ``fsdp_fidelity_config``."""
    # Imported here, as strategies/fsdp.py imports FSDP2: a second of import every bench process would pay.
    from bench.experiments.baselines.plain_fsdp import plain_fsdp_step_times

    assert config.run.batch_size is not None, "fsdp_fidelity_config resolves config (resolve fills in batch_size)"
    script = functools.partial(plain_fsdp_step_times, reshard_after_forward=config.fsdp.reshard_after_forward)
    suite, plain = _side_by_side(config, rounds, script)
    return Comparison.from_rounds(
        "fsdp-vs-plain-fsdp",
        f"fsdp vs plain FSDP2 script ({PROCESSES} processes)",
        Setup(config.workload.model, config.workload.preset, PROCESSES, config.run.accelerator, config.run.batch_size),
        suite,
        plain,
        tolerance=0.03,
    )


def _side_by_side(
    config: RunConfig, rounds: int, script: PlainStepTimes
) -> tuple[list[list[float]], list[list[float]]]:
    """Seconds per step in each round of ``config``'s strategy and of ``script``, alternated in the same 2
    processes."""
    with tempfile.TemporaryDirectory() as folder:
        start_ranks(_worker, (config, rounds, folder, script), PROCESSES)
        return torch.load(os.path.join(folder, "times.pt"))


def _worker(rank: int, config: RunConfig, rounds: int, folder: str, script: PlainStepTimes) -> None:
    world = PROCESSES
    become_rank(rank, world, folder)
    topo = torchrun_topology(config.run.accelerator)
    if config.run.accelerator == "cpu":
        torch.set_num_threads(threads_per_process(world))  # as the launcher sets it for `bench run`

    def plain() -> list[float]:
        assert config.run.batch_size is not None, "_side_by_side's config is resolved (resolve fills in batch_size)"
        mine = script(config.workload.model, config.workload.preset, config.run.batch_size, config.measure.steps,
                      config.run.warmup,
                      config.workload.seed, str(topo.devices[0]))
        return [max(step) for step in zip(*gather_objects(mine), strict=True)]

    # One group for every round of both sides: the strategies keep a group they did not make. Leaving,
    # it collects what still holds the group first (fully_shard's models live on in reference cycles).
    with process_group(topo, config.measure.timeout_s):
        measure = {"suite": lambda: [t / 1e3 for t in step_times_ms(train(config).ranks)], "plain": plain}
        times = _alternated(measure, rounds, progress=rank == 0)
    if rank == 0:
        torch.save((times["suite"], times["plain"]), os.path.join(folder, "times.pt"))
