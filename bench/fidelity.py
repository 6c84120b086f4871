"""How far to trust the numbers: the harness against hand-written loops, measured side by side.

Each comparison alternates the two sides round by round in one process (A B, B A, A B, ...),
so that drift in the machine's speed (other load, thermal state) falls on both sides alike,
and reports the ratio of their median step times.
"""

from __future__ import annotations

import dataclasses
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
        f"ddp vs plain DDP script ({DDP_PROCESSES} processes)",
        statistics.median(suite) * 1e3,
        statistics.median(plain) * 1e3,
        "within 3%",
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


@dataclass(frozen=True)
class PipelineSpeedup:
    """pp's median step time against mp's on the same stages and micro-batches."""

    name: str
    pp_ms: float
    mp_ms: float
    ideal: float
    """p*m/(m+p-1): the speed-up of a perfect pipeline over running its stages one after another."""

    @property
    def speedup(self) -> float:
        return self.mp_ms / self.pp_ms

    def line(self) -> str:
        return (
            f"{self.name}: speed-up {self.speedup:.2f} = {self.speedup / self.ideal:.0%} of the ideal "
            f"{self.ideal:.2f} (pp {self.pp_ms:.1f} ms, mp {self.mp_ms:.1f} ms per step)"
        )


def pp_vs_mp(config: RunConfig, rounds: int, microbatches: tuple[int, ...] = (4, 8)) -> list[PipelineSpeedup]:
    """``pp`` on 2 processes against ``mp`` in this process: mlp small, balanced, M micro-batches.

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
    per_rank = threads_per_process(PP_STAGES) if config.accelerator == "cpu" else torch.get_num_threads()
    sides = {"pp": per_rank, "mp": per_rank, "mp-all": torch.get_num_threads()}
    times: dict[tuple[str, int], list[float]] = {(side, m): [] for side in sides for m in microbatches}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        inboxes = [ctx.Queue() for _ in range(PP_STAGES)]
        outbox = ctx.Queue()
        workers = [ctx.Process(target=_pp_worker, args=(r, inboxes[r], outbox, folder, per_rank))
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
                            times[side, m].extend(outbox.get(timeout=config.timeout_s))
                        else:
                            mp_config = resolve(dataclasses.replace(base, strategy="mp", microbatches=m))
                            times[side, m].extend(_mp_step_times(mp_config, sides[side]))
                log.info("round %d/%d done", r + 1, rounds)
        finally:
            for inbox in inboxes:
                inbox.put(None)
            for w in workers:
                w.join(timeout=60)
    out = []
    for m in microbatches:
        pp_ms = statistics.median(times["pp", m])
        for side, label in (("mp", f"{per_rank} thread(s), as one pp rank"), ("mp-all", f"{sides['mp-all']} threads")):
            name = f"pp vs mp, {PP_STAGES} stages, M={m}, mp on {label}"
            out.append(PipelineSpeedup(name, pp_ms, statistics.median(times[side, m]), ideal_speedup(PP_STAGES, m)))
    return out


def _mp_step_times(config: RunConfig, threads: int) -> list[float]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return step_times_ms(train(config).ranks)
    finally:
        torch.set_num_threads(before)


def _pp_worker(rank: int, inbox: object, outbox: object, folder: str, threads: int) -> None:
    """One pp rank that keeps its process group and trains each config it is sent until None."""
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
            times = step_times_ms(train(config).ranks)
            if rank == 0:
                outbox.put(times)  # type: ignore[attr-defined]
    finally:
        if group_made:
            destroy_process_group()
