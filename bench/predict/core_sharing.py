"""How much slower a process computes while others compute beside it: what emulated devices sharing a CPU's cores
cost (a calibration's ``slowdown``), measured side by side and judged as runs are."""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch

from bench.harness.disturbance import RankLoad, Snapshot, Verdict, judge, machine_cores
from bench.harness.processes import die_with_parent
from bench.harness.ranks import rank_context
from bench.predict.compute import Disturbed
from models.spec import ModelSpec

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier


def _busy_loop(rank: int, make_spec: Callable[[], ModelSpec], batch: int, threads: int, seconds: float,
               start: Barrier, results: Queue) -> None:
    die_with_parent()
    torch.set_num_threads(threads)
    spec = make_spec()
    inputs, targets = spec.make_batch(batch, torch.Generator().manual_seed(0))
    spec.loss_fn(spec.blocks(inputs), targets).backward()  # warm
    start.wait()
    before = Snapshot.now()
    mean = mean_step_s(lambda: spec.loss_fn(spec.blocks(inputs), targets).backward(), seconds)
    # what this worker saw of the machine meanwhile, as a run's rank notes it (bench/harness/disturbance.py)
    results.put((rank, mean, RankLoad.between(before, Snapshot.now())))


def mean_step_s(step: Callable[[], object], seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """The mean time of ``step`` run over and over for ``seconds``: the window over the steps done.

    Not the median step: on oversubscribed cores a process waits for its turn between steps as often as
    within them, and a step short enough to finish inside its time slice shows no slowdown at all (the
    tiny mlp's median said 1.0 with 4 processes on 2 cores, its mean 2.2 to 2.7)."""
    steps, began = 0, clock()
    while (now := clock()) - began < seconds or steps == 0:
        step()
        steps += 1
    return (now - began) / steps


TRIES = 3
"""Disturbed measurements of a slowdown before a calibration gives up on a machine other work keeps busy."""
PAIRS = 3
"""Quiet pairs (alone, together) a slowdown is the median ratio of."""


def slowdown(make_spec: Callable[[], ModelSpec], batch: int, processes: int, threads: int, seconds: float,
             tries: int = TRIES, pairs: int = PAIRS) -> float:
    """How much slower one process's forward+backward runs while ``processes`` run it at once (each
    with ``threads`` threads) than while it runs alone: what emulated devices sharing cores cost.

    Measured side by side, in ``pairs`` pairs (alone, then together, seconds apart), and kept at the median
    of the pairs' ratios: the machine's drift moves both sides of a pair alike. Alone and together measured
    apart (the quickest of each, a few tries later) said anywhere from 1.0 to 1.73 for mlp/small on 2
    processes of the 2-core VM, where the pairs' medians said 1.047 and 1.053 (their ratios 0.99-1.13).
    Each side is judged as runs are (bench/harness/disturbance.py: other processes' share of the cores over
    the window), and a pair with a disturbed side is measured again: one calibration taken while another
    job used the cores said 1.905 for 2 processes where the quiet machine's said 1.015, and every
    multi-process prediction followed it. ``Disturbed`` once ``tries`` pairs were.

    Never less than the processes' threads per core: more of them than cores cannot each run at full
    speed, and a ratio under that (or under 1) is the machine's noise, not a speed-up."""
    ratios: list[float] = []
    disturbed = 0
    while len(ratios) < pairs:
        alone, alone_verdict = _together(make_spec, batch, 1, threads, seconds)
        together, together_verdict = _together(make_spec, batch, processes, threads, seconds)
        reason = alone_verdict.reason if alone_verdict.disturbed else together_verdict.reason
        if alone_verdict.disturbed or together_verdict.disturbed:
            disturbed += 1
            if disturbed >= tries:
                raise Disturbed(f"{processes} process(es) computing together were disturbed in {tries} pairs "
                                f"of tries ({reason}); calibrate on a quiet machine")
            log.warning("slowdown of %d process(es) disturbed, measuring the pair again: %s", processes, reason)
            continue
        ratios.append(together / alone)
    return max(1.0, processes * threads / (os.cpu_count() or 1), statistics.median(ratios))


def _together(make_spec: Callable[[], ModelSpec], batch: int, processes: int, threads: int,
              seconds: float) -> tuple[float, Verdict]:
    # forked from a server that imported torch once, not each process importing it; rank_context is typed as a
    # BaseContext, which typeshed gives no Process: it is the forkserver context
    ctx = cast("ForkServerContext", rank_context())
    start, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_busy_loop, args=(r, make_spec, batch, threads, seconds, start, results))
               for r in range(processes)]
    for w in workers:
        w.start()
    ended = [results.get(timeout=120 + seconds) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    return statistics.median(e[1] for e in ended), judge([e[2] for e in ended], machine_cores())
