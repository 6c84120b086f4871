"""How far to trust the numbers: the harness against hand-written loops, measured side by side.

Each comparison alternates the two sides round by round in one process (A B, B A, A B, ...),
so that drift in the machine's speed (other load, thermal state) falls on both sides alike,
and reports the ratio of their median step times. Each result is also a record (``kind``
``fidelity``) that ``bench report`` turns into its "How far to trust these numbers" section.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import statistics
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing as mp

from bench.baselines.plain_ddp import plain_ddp_step_times
from bench.baselines.plain_loop import plain_step_times
from bench.config import RunConfig, resolve
from bench.launch import threads_per_process
from bench.ranks import become_rank
from bench.records import RECORD_VERSION
from bench.runner import step_times_ms, train
from strategies.distributed import (
    destroy_process_group,
    gather_objects,
    init_process_group,
    torchrun_topology,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Setup:
    """What a comparison ran on, as its record names it."""

    model: str
    preset: str
    devices: int
    accelerator: str
    global_batch_size: int

    def record_fields(self) -> dict[str, object]:
        # As failure_record counts it: several devices on one CPU are emulated, one is not.
        emulated = self.accelerator == "cpu" and self.devices > 1
        return {"model": self.model, "preset": self.preset, "device_count": self.devices,
                "accelerator": self.accelerator, "global_batch_size": self.global_batch_size,
                "emulated": emulated}  # fmt: skip


@dataclass(frozen=True)
class Comparison:
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

    def line(self) -> str:
        return (
            f"{self.name}: ratio {self.ratio:.3f} (suite {self.suite_ms:.2f} ms, "
            f"baseline {self.baseline_ms:.2f} ms per step; target {self.target})"
        )

    def record_fields(self) -> dict[str, object]:
        return {"comparison": self.comparison, "name": self.name, "ratio": self.ratio, "suite_ms": self.suite_ms,
                "baseline_ms": self.baseline_ms, "target": self.target, "met": self.met,
                **self.setup.record_fields()}  # fmt: skip


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
        "single-vs-plain-loop",
        "single vs plain PyTorch loop",
        Setup(config.model, config.preset, 1, config.accelerator, config.batch_size),
        statistics.median(suite) * 1e3,
        statistics.median(plain) * 1e3,
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
    init_process_group(topo, config.timeout_s)  # ddp keeps a group it did not make
    suite: list[float] = []
    plain: list[float] = []
    try:
        for r in range(rounds):
            sides = ("suite", "plain") if r % 2 == 0 else ("plain", "suite")
            for side in sides:
                if side == "suite":
                    suite.extend(t / 1e3 for t in step_times_ms(train(config).ranks))
                else:
                    mine = plain_ddp_step_times(config.model, config.preset, config.batch_size, config.steps,
                                                config.warmup, config.seed, str(topo.devices[0]))  # fmt: skip
                    per_rank = gather_objects(mine)
                    plain.extend(max(step) for step in zip(*per_rank, strict=True))
            if rank == 0:
                log.info("round %d/%d done", r + 1, rounds)
    finally:
        destroy_process_group()
    if rank == 0:
        torch.save((suite, plain), os.path.join(folder, "times.pt"))


if TYPE_CHECKING:  # bench.fidelity_pipeline imports Setup from here
    from bench.fidelity_pipeline import BubbleCheck, PipelineSpeedup

    FidelityResult = Comparison | PipelineSpeedup | BubbleCheck


def fidelity_record(result: FidelityResult, config: RunConfig, rounds: int, env: dict[str, object]) -> dict:
    """The record of one comparison: its figures, target and verdict, what it ran on, and how often."""
    return {
        "record_version": RECORD_VERSION,
        "kind": "fidelity",
        "status": "ok",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **result.record_fields(),
        "rounds": rounds,
        "steps_per_round": config.steps,
        "warmup_steps": config.warmup,
        "env": env,
    }
