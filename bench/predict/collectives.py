"""Measuring the collectives and point-to-point transfers the strategies use, on N processes of this machine.

Every size is timed as the slowest rank sees it (a collective ends for the step when its last rank
leaves it), the median over a few repeats after a warm-up, each repeat started together (barrier).
A small message's repeat times several operations back to back, as a strategy issues them: one
operation alone also times how late each rank leaves the barrier, which on shared cores can be more
than the operation (a 4 KiB all-reduce among 2 processes of the 2-core VM once timed 5.5 ms alone, more
than a whole measured ddp step of the tiny mlp, 4.0 ms, that all-reduces its gradients in it).
Everything is measured in ``GROUPS`` groups of processes and each figure is the median over them: a
group keeps how the OS placed its processes for its whole life.
Sizes are the bytes of the tensor each rank contributes (all_gather: each rank's shard;
reduce_scatter: each rank's whole input), so the strategies' cost models name the same bytes.
"""

from __future__ import annotations

import gc
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from bench.harness.config import RunConfig
from bench.harness.disturbance import Verdict, judge, machine_cores
from bench.harness.ranks import become_rank, start_ranks
from bench.harness.runner import RunResult, step_times_ms, train
from bench.predict.compute import half_range
from bench.predict.curves import Curve
from strategies.cost_model import threads_per_process
from strategies.distributed import process_group, torchrun_topology

log = logging.getLogger(__name__)

OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
KIB = 1024
GROUPS = 3
"""Groups of processes everything is measured in; each figure is the median over them. On the 2-core VM
one group's 24-step median of the tiny mlp's tp x2 came out anywhere from 16.0 to 28.2 ms over eight
groups; where a sweep's batch is the reference run's, its prediction is that measurement."""
BATCHED_BYTES = 1024 * KIB
"""Messages up to this size are timed several to a repeat (``_operations_per_repeat``)."""


def default_sizes(largest: int = 256 * KIB * KIB) -> list[int]:
    """4 KiB, 16 KiB, ... up to ``largest``: every factor of 4."""
    sizes, size = [], 4 * KIB
    while size <= largest:
        sizes.append(size)
        size *= 4
    return sizes


def operation_sizes(name: str, sizes: Sequence[int], world: int) -> list[int]:
    """The sizes ``name`` is timed at: all of them, but an all-gather's only up to the largest over the ranks
    (its size is each rank's shard; the largest message is the whole gradient, which a shard is a rank's part of),
    and at least its two smallest (a curve). Its largest shard gathered 2 x 64 MiB for the small mlp's 32 MiB of
    gradients on 2 ranks: 0.7 s of each group's 5 s of collectives, for a size no strategy sends."""
    if name != "all_gather":
        return list(sizes)
    return [s for i, s in enumerate(sizes) if i < 2 or s <= max(sizes) // world]


def _operation(name: str, size: int, world: int, rank: int, device: torch.device) -> Callable[[], object]:
    elements = max(1, size // 4)
    tensor = torch.ones(elements, device=device)
    if name == "all_reduce":
        return lambda: dist.all_reduce(tensor)
    if name == "all_gather":
        out = torch.empty(elements * world, device=device)
        return lambda: _quiet(dist.all_gather_into_tensor, out, tensor)
    if name == "reduce_scatter":
        whole = torch.ones(elements - elements % world or world, device=device)
        out = torch.empty(whole.numel() // world, device=device)
        return lambda: _quiet(dist.reduce_scatter_tensor, out, whole)
    if name == "broadcast":
        return lambda: dist.broadcast(tensor, src=0)
    if name == "send_recv":  # rank 0 to rank 1, as a pipeline's neighbours; the others wait at the barrier
        if rank == 0:
            return lambda: dist.send(tensor, dst=1)
        if rank == 1:
            return lambda: dist.recv(tensor, src=0)
        return lambda: None
    raise ValueError(f"unknown operation {name!r}; choose from {', '.join(OPERATIONS)}")


def _quiet(operation: Callable, *args: object) -> None:
    """torch 2.14 marks all_gather_into_tensor and reduce_scatter_tensor deprecated (FSDP2 still calls
    them); 2.11 has no successor."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        operation(*args)


def _repeats(size: int) -> int:
    return 3 if size >= 64 * KIB * KIB else 5


def _operations_per_repeat(size: int) -> int:
    """16 back to back at 4-64 KiB, fewer up to ``BATCHED_BYTES``, then one."""
    return max(1, min(16, BATCHED_BYTES // size))


def _worker(rank: int, world: int, folder: str, accelerator: str, sizes: Sequence[int], timeout_s: float,
            references: dict[str, RunConfig]) -> None:
    become_rank(rank, world, folder)
    torch.set_num_threads(threads_per_process(world))  # as a run's ranks have: one ddp rank alone has every core
    topo = torchrun_topology(accelerator)
    device = topo.devices[0]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results: dict[str, list[tuple[int, float]]] = {}
    steps: dict[str, float] = {}
    with process_group(topo, timeout_s):
        # What lives now outlives every run here: each run's end collects only what came after (a whole collection
        # took 0.13 s a run, frozen 0.002; the small mlp's group of 2 ranks runs 12)
        gc.freeze()
        for name, config in references.items():  # the runtimes' reference runs (bench/predict/runtime.py)
            result, _ = undisturbed_run(config)  # kept even if disturbed: the median over groups rules
            steps[name] = statistics.median(step_times_ms(result.ranks))
            if (bubble := result.strategy_fields.get("measured_bubble_fraction")) is not None:
                steps[bubble_key(name)] = bubble  # where the runtime's residual falls: in the spans or between
        for name in OPERATIONS if world > 1 else ():  # one rank alone runs only its reference runs
            points = []
            for size in operation_sizes(name, sizes, world):
                run = _operation(name, size, world, rank, device)
                run()  # warm-up: connections, buffers
                seconds, operations = [], _operations_per_repeat(size)
                for _ in range(_repeats(size)):
                    dist.barrier()
                    start = time.perf_counter()
                    for _ in range(operations):
                        run()
                    sync()
                    seconds.append((time.perf_counter() - start) / operations)
                slowest = torch.tensor(seconds, dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                points.append((size, statistics.median(slowest.tolist()) * 1e3))
            results[name] = points
        if world > 1:
            steps["overlap"] = _overlap(device, sync)
    if rank == 0:
        torch.save((results, steps), os.path.join(folder, "collectives.pt"))


REFERENCE_TRIES = 3
"""Runs of a reference run before its disturbed median is kept anyway (and the calibration says so)."""


BUBBLE = ":bubble"
"""Suffix of the key of a reference run's measured bubble among its group's figures."""


def bubble_key(reference: str) -> str:
    """The key of reference run ``reference``'s measured bubble fraction beside its median step."""
    return reference + BUBBLE


def undisturbed_run(config: RunConfig) -> tuple[RunResult, Verdict]:
    """A reference run and the verdict on its last try, run again while other work disturbed it, as a sweep
    reruns its disturbed runs (on ranks, every rank sees the same gathered verdict, so all run again
    together). The caller decides what a run disturbed every time is worth."""
    for attempt in range(REFERENCE_TRIES):
        result = train(config)
        verdict = judge([r.load for r in result.ranks if r.load is not None], machine_cores())
        if not verdict.disturbed:
            break
        if not dist.is_initialized() or dist.get_rank() == 0:
            log.warning("reference run %s disturbed (try %d of %d): %s", config.strategy, attempt + 1,
                        REFERENCE_TRIES, verdict.reason)
    return result, verdict


def undisturbed_step_ms(config: RunConfig) -> tuple[float, Verdict]:
    """``undisturbed_run``'s median step and verdict."""
    result, verdict = undisturbed_run(config)
    return statistics.median(step_times_ms(result.ranks)), verdict


OVERLAP_BYTES = 16 * KIB * KIB


def _overlap(device: torch.device, sync: Callable[[], None]) -> float:
    """How much of an all-reduce hides behind compute started with it: (alone + alone - together) over the
    shorter of the two, 0 (none) to 1 (all). Every rank does the same at once, as a data-parallel step does."""
    tensor = torch.ones(OVERLAP_BYTES // 4, device=device)
    a = torch.randn(256, 256, device=device)

    def compute() -> None:
        for _ in range(40):
            a @ a
        sync()

    def timed(body: Callable[[], None]) -> float:
        samples = []
        for _ in range(4):
            dist.barrier()
            start = time.perf_counter()
            body()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples[1:])

    def both() -> None:
        work = dist.all_reduce(tensor, async_op=True)
        compute()
        work.wait()
        sync()

    def all_reduce() -> None:
        dist.all_reduce(tensor)
        sync()

    communicate = timed(all_reduce)
    alone = timed(compute)
    together = timed(both)
    return max(0.0, min(1.0, (communicate + alone - together) / min(communicate, alone)))


def measure_collectives(
    world: int, accelerator: str, sizes: Sequence[int], timeout_s: float = 300.0,
    references: dict[str, RunConfig] | None = None, groups: int = GROUPS,
) -> tuple[dict[str, Curve], dict[str, float]]:
    """Each operation's milliseconds by bytes on ``world`` processes of this machine (a larger message
    never costs less: each point is at most every larger one's), the median step of each reference run
    and ``overlap`` (the share of an all-reduce hidden behind compute): each the median over ``groups``
    groups of processes."""
    measured = []
    for _ in range(groups):
        with tempfile.TemporaryDirectory() as folder:
            start_ranks(_worker, (world, folder, accelerator, list(sizes), timeout_s, references or {}), world)
            measured.append(torch.load(os.path.join(folder, "collectives.pt")))
    curves = {name: Curve(_monotone(_median_points([points[name] for points, _ in measured])))
              for name in measured[0][0]}  # none on one process
    return curves, _median_over_groups([steps for _, steps in measured])


def _median_over_groups(groups: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over what each group of processes measured for it, and ``spread``: the median over
    the reference runs of half their range over the groups, over their median (``half_range``)."""
    medians = {name: statistics.median(group[name] for group in groups) for name in groups[0]}
    runs = [name for name in groups[0] if name != "overlap" and not name.endswith(BUBBLE)]
    spread = statistics.median(half_range([g[name] for g in groups]) for name in runs) if runs else 0.0
    return {**medians, "spread": spread}


def _median_points(groups: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """One curve's points, each size's time the median over the groups."""
    return [(size, statistics.median(points[i][1] for points in groups)) for i, (size, _) in enumerate(groups[0])]


def _monotone(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Noise can make a small message look slower than a larger one; the larger one's time bounds it."""
    out, bound = [], float("inf")
    for size, ms in reversed(points):
        bound = min(bound, ms)
        out.append((size, bound))
    return out[::-1]
