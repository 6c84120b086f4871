"""The harness against hand-written loops: ``single`` against the tutorial's plain loop, ``ddp`` on 2
processes against the DDP tutorial's script, each reported as the ratio of median step times."""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.multiprocessing as mp

from bench.baselines.plain_ddp import plain_ddp_step_times
from bench.baselines.plain_loop import plain_step_times
from bench.config import RunConfig, resolve
from bench.fidelity.results import FigureAndLine, Setup, alternate, figure_text
from bench.launch import threads_per_process
from bench.ranks import become_rank
from bench.runner import step_times_ms, train
from strategies.distributed import (
    destroy_process_group,
    gather_objects,
    init_process_group,
    torchrun_topology,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Comparison(FigureAndLine):
    """One side-by-side measurement: the suite's median step time over the baseline's."""

    comparison: str
    """A stable id for the record: ``single-vs-plain-loop``, ``ddp-vs-plain-ddp``."""
    name: str
    setup: Setup
    suite_ms: float
    baseline_ms: float
    tolerance: float
    """How far from 1 the ratio may be: 0.02 is "within 2%"."""

    @property
    def ratio(self) -> float:
        return self.suite_ms / self.baseline_ms

    @property
    def target(self) -> str:
        return f"within {self.tolerance:.0%}"

    @property
    def met(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance

    def _figure(self, target: str | None = None) -> str:
        detail = f"suite {self.suite_ms:.2f} ms, baseline {self.baseline_ms:.2f} ms per step"
        return figure_text(f"ratio {self.ratio:.3f}", detail, target)

    def record_fields(self) -> dict[str, object]:
        return {"comparison": self.comparison, "name": self.name, "ratio": self.ratio, "suite_ms": self.suite_ms,
                "baseline_ms": self.baseline_ms, "target": self.target, "met": self.met,
                **self.setup.record_fields()}


def _alternated(
    measure: dict[str, Callable[[], list[float]]], rounds: int, progress: bool = True
) -> dict[str, list[float]]:
    """Each side's step times over ``rounds`` rounds, the sides alternating A B, B A, ..."""
    times: dict[str, list[float]] = {side: [] for side in measure}
    for r, order in enumerate(alternate(list(measure), rounds)):
        for side in order:
            times[side].extend(measure[side]())
        if progress:
            log.info("round %d/%d done", r + 1, rounds)
    return times


def single_vs_plain_loop(config: RunConfig, rounds: int) -> Comparison:
    """The ``single`` strategy's median step time against the tutorial loop's, same model and batch."""
    config = dataclasses.replace(config, strategy="single", optimizer="sgd", lr=0.01)
    device = "cuda" if config.accelerator == "cuda" else "cpu"
    times = _alternated({
        "suite": lambda: train(config).ranks[0].step_times_s,
        "plain": lambda: plain_step_times(config.model, config.preset, config.batch_size, config.steps,
                                          config.warmup, config.seed, device),
    }, rounds)
    return Comparison(
        "single-vs-plain-loop",
        "single vs plain PyTorch loop",
        Setup(config.model, config.preset, 1, config.accelerator, config.batch_size),
        statistics.median(times["suite"]) * 1e3,
        statistics.median(times["plain"]) * 1e3,
        tolerance=0.02,
    )


DDP_PROCESSES = 2


def ddp_fidelity_config(config: RunConfig) -> RunConfig | None:
    """``config`` as the ddp comparison runs it, validated (ConfigError on a batch 2 does not divide);
    None where this machine cannot run it (fewer than 2 GPUs on CUDA)."""
    if config.accelerator == "cuda" and torch.cuda.device_count() < DDP_PROCESSES:
        log.warning("ddp comparison skipped: it needs %d GPUs", DDP_PROCESSES)
        return None
    ddp = dataclasses.replace(config, strategy="ddp", devices=DDP_PROCESSES, optimizer="sgd", lr=0.01)
    return resolve(ddp)


def ddp_vs_plain_ddp(config: RunConfig, rounds: int) -> Comparison:
    """The ``ddp`` strategy on 2 processes against the DDP tutorial's script, same model and global batch.

    ``config`` comes from ``ddp_fidelity_config``. Both sides run in the same 2 processes and
    process group, alternating round by round; each side's step time is the slowest rank's per
    step, as in the suite's records.
    """
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(
            _ddp_worker, args=(config, rounds, folder), nprocs=DDP_PROCESSES, join=True, start_method="spawn"
        )
        suite, plain = torch.load(os.path.join(folder, "times.pt"))
    return Comparison(
        "ddp-vs-plain-ddp",
        f"ddp vs plain DDP script ({DDP_PROCESSES} processes)",
        Setup(config.model, config.preset, DDP_PROCESSES, config.accelerator, config.batch_size),
        statistics.median(suite) * 1e3,
        statistics.median(plain) * 1e3,
        tolerance=0.03,
    )


def _ddp_worker(rank: int, config: RunConfig, rounds: int, folder: str) -> None:
    world = DDP_PROCESSES
    become_rank(rank, world, folder)
    topo = torchrun_topology(config.accelerator)
    if config.accelerator == "cpu":
        torch.set_num_threads(threads_per_process(world))  # as the launcher sets it for `bench run`

    def plain() -> list[float]:
        mine = plain_ddp_step_times(config.model, config.preset, config.batch_size, config.steps, config.warmup,
                                    config.seed, str(topo.devices[0]))
        return [max(step) for step in zip(*gather_objects(mine), strict=True)]

    init_process_group(topo, config.timeout_s)  # ddp keeps a group it did not make
    try:
        measure = {"suite": lambda: [t / 1e3 for t in step_times_ms(train(config).ranks)], "plain": plain}
        times = _alternated(measure, rounds, progress=rank == 0)
    finally:
        destroy_process_group()
    if rank == 0:
        torch.save((times["suite"], times["plain"]), os.path.join(folder, "times.pt"))
