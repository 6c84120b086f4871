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

import torch
import torch.multiprocessing as mp

from bench.baselines.plain_ddp import plain_ddp_step_times
from bench.baselines.plain_loop import plain_step_times
from bench.config import RunConfig, resolve
from bench.launch import threads_per_process
from bench.records import RECORD_VERSION
from bench.runner import step_times_ms, train
from strategies.distributed import (
    RENDEZVOUS_FILE_VARIABLE,
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
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ[RENDEZVOUS_FILE_VARIABLE] = os.path.join(folder, "rendezvous")
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


PP_STAGES = 2
SPEEDUP_TARGET = 0.85
"""The share of the ideal p*m/(m+p-1) speed-up that pp should reach over mp on one pp rank's threads."""
BUBBLE_TOLERANCE = 0.05
"""How far the measured bubble fraction may be from the schedule's theoretical one."""
BUBBLE_MICROBATCHES_PER_STAGE = 4
"""The bubble is held to its theory only where m >= 4p: GPipe (Huang et al. 2019) finds the bubble
negligible there, which is where pipelines are run; with fewer micro-batches it is a design choice."""


@dataclass(frozen=True)
class PipelineSpeedup:
    """pp's median step time against mp's on the same stages and micro-batches."""

    name: str
    setup: Setup
    microbatches: int
    mp_threads: int
    pp_ms: float
    mp_ms: float
    ideal: float
    """p*m/(m+p-1): the speed-up of a perfect pipeline over running its stages one after another."""
    target_share: float | None
    """The share of ``ideal`` to reach; None for a figure shown for information, held to nothing."""

    @property
    def speedup(self) -> float:
        return self.mp_ms / self.pp_ms

    @property
    def share(self) -> float:
        return self.speedup / self.ideal

    @property
    def target(self) -> str:
        return "none (for information)" if self.target_share is None else f"at least {self.target_share:.0%} of ideal"

    @property
    def met(self) -> bool | None:
        return None if self.target_share is None else self.share >= self.target_share

    def line(self) -> str:
        return (
            f"{self.name}: speed-up {self.speedup:.2f} = {self.share:.0%} of the ideal "
            f"{self.ideal:.2f} (pp {self.pp_ms:.1f} ms, mp {self.mp_ms:.1f} ms per step; target {self.target})"
        )

    def record_fields(self) -> dict[str, object]:
        return {"comparison": "pp-vs-mp", "name": self.name, "speedup": self.speedup, "ideal_speedup": self.ideal,
                "share_of_ideal": self.share, "suite_ms": self.pp_ms, "baseline_ms": self.mp_ms,
                "microbatches": self.microbatches, "mp_threads": self.mp_threads, "target": self.target,
                "met": self.met, **self.setup.record_fields()}  # fmt: skip


@dataclass(frozen=True)
class PipelineRound:
    """What rank 0 of the pp workers sends back for one training run."""

    step_times_ms: list[float]
    measured_bubble: float | None
    theoretical_bubble: float | None
    """None for zero-bubble schedules, whose bubble has no closed form."""


@dataclass(frozen=True)
class BubbleCheck:
    """pp's measured bubble fraction (median over rounds) against its schedule's theoretical one."""

    name: str
    setup: Setup
    schedule: str
    microbatches: int
    measured: float
    theoretical: float
    pp_ms: float
    tolerance: float = BUBBLE_TOLERANCE

    @property
    def difference(self) -> float:
        return self.measured - self.theoretical

    @property
    def target(self) -> str:
        return f"within {self.tolerance:g}"

    @property
    def met(self) -> bool:
        return abs(self.difference) <= self.tolerance

    def line(self) -> str:
        return (
            f"{self.name}: measured bubble {self.measured:.3f} vs theoretical {self.theoretical:.3f} "
            f"(difference {self.difference:+.3f}; target {self.target})"
        )

    def record_fields(self) -> dict[str, object]:
        return {"comparison": "pp-bubble", "name": self.name, "measured_bubble_fraction": self.measured,
                "theoretical_bubble_fraction": self.theoretical, "bubble_difference": self.difference,
                "suite_ms": self.pp_ms, "schedule": self.schedule, "microbatches": self.microbatches,
                "target": self.target, "met": self.met, **self.setup.record_fields()}  # fmt: skip


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
        checks.append(BubbleCheck(name, setup, schedule, m, statistics.median(measured), theoretical, pp_ms))
    return checks


def pp_vs_mp(
    config: RunConfig, rounds: int, microbatches: tuple[int, ...] = (4, 8)
) -> tuple[list[PipelineSpeedup], list[BubbleCheck]]:
    """``pp`` on 2 processes against ``mp`` in this process: mlp small, balanced, M micro-batches;
    and pp's measured bubble against its theoretical one where M >= 4p.

    Both split the same blocks the same way ([4, 5] by parameter count: four hidden layers on
    each side, the small head with the second) and feed the same micro-batches; mp runs the stages
    one after another, pp overlaps them, so the ideal speed-up is p*m/(m+p-1).

    Threads, for an honest comparison on a CPU: each pp rank gets cores // 2 threads, as the
    launcher gives it. Against that, mp is measured twice. With the same threads as one pp rank
    (one emulated device working at a time, as on GPUs), the ratio isolates what pipelining buys;
    this is the figure held to the ideal. With all the cores (the same total as pp), mp's stages
    get intra-op parallelism instead, and the ratio says whether pipelining beats that.
    """
    from strategies.schedules import ideal_speedup

    base = dataclasses.replace(config, model="mlp", preset="small", batch_size=64, balance="params", devices=PP_STAGES,
                               optimizer="sgd", lr=0.01)  # fmt: skip
    setup = Setup(base.model, base.preset, PP_STAGES, base.accelerator, base.batch_size)
    per_rank = threads_per_process(PP_STAGES) if config.accelerator == "cpu" else torch.get_num_threads()
    sides = {"pp": per_rank, "mp": per_rank, "mp-all": torch.get_num_threads()}
    mp_times, pp_rounds = _pipeline_rounds(base, sides, rounds, microbatches)
    speedups = []
    for m in microbatches:
        pp_ms = statistics.median(t for r in pp_rounds[m] for t in r.step_times_ms)
        for side, label, target in (("mp", f"{per_rank} thread(s), as one pp rank", SPEEDUP_TARGET),
                                    ("mp-all", f"{sides['mp-all']} threads", None)):  # fmt: skip
            name = f"pp vs mp, {PP_STAGES} stages, M={m}, mp on {label}"
            speedups.append(PipelineSpeedup(name, setup, m, sides[side], pp_ms, statistics.median(mp_times[side, m]),
                                            ideal_speedup(PP_STAGES, m), target))  # fmt: skip
    return speedups, bubble_checks(pp_rounds, setup, base.schedule)


def _pipeline_rounds(
    base: RunConfig, sides: dict[str, int], rounds: int, microbatches: tuple[int, ...]
) -> tuple[dict[tuple[str, int], list[float]], dict[int, list[PipelineRound]]]:
    """Alternates pp (in 2 worker processes that keep one process group) and mp's sides, round by
    round; returns mp's step times per (side, M) and pp's rounds per M."""
    mp_times: dict[tuple[str, int], list[float]] = {(s, m): [] for s in sides if s != "pp" for m in microbatches}
    pp_rounds: dict[int, list[PipelineRound]] = {m: [] for m in microbatches}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        inboxes = [ctx.Queue() for _ in range(PP_STAGES)]
        outbox = ctx.Queue()
        workers = [ctx.Process(target=_pp_worker, args=(r, inboxes[r], outbox, folder, sides["pp"]))
                   for r in range(PP_STAGES)]  # fmt: skip
        for w in workers:
            w.start()
        try:
            for r in range(rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for m in microbatches:
                    for side in order:
                        if side == "pp":
                            pp = resolve(dataclasses.replace(base, strategy="pp", microbatches=m))
                            for inbox in inboxes:
                                inbox.put(pp)
                            pp_rounds[m].append(outbox.get(timeout=base.timeout_s))
                        else:
                            mp_config = resolve(dataclasses.replace(base, strategy="mp", microbatches=m))
                            mp_times[side, m].extend(_mp_step_times(mp_config, sides[side]))
                log.info("round %d/%d done", r + 1, rounds)
        finally:
            for inbox in inboxes:
                inbox.put(None)
            for w in workers:
                w.join(timeout=60)
    return mp_times, pp_rounds


def _mp_step_times(config: RunConfig, threads: int) -> list[float]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return step_times_ms(train(config).ranks)
    finally:
        torch.set_num_threads(before)


def _pp_worker(rank: int, inbox: object, outbox: object, folder: str, threads: int) -> None:
    """One pp rank that keeps its process group and trains each config it is sent until None;
    rank 0 sends back each run's step times and bubble figures."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(PP_STAGES), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(PP_STAGES))  # fmt: skip
    os.environ[RENDEZVOUS_FILE_VARIABLE] = os.path.join(folder, "rendezvous")
    torch.set_num_threads(threads)
    group_made = False
    try:
        while (config := inbox.get()) is not None:  # type: ignore[attr-defined]
            if not group_made:
                init_process_group(torchrun_topology(config.accelerator), config.timeout_s)  # pp keeps it
                group_made = True
            result = train(config)
            if rank == 0:
                fields = result.strategy_fields
                bubbles = (fields.get("measured_bubble_fraction"), fields.get("theoretical_bubble_fraction"))
                outbox.put(PipelineRound(step_times_ms(result.ranks), *bubbles))  # type: ignore[attr-defined,arg-type]
    finally:
        if group_made:
            destroy_process_group()


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
