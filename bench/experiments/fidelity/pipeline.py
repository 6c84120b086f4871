"""How far to trust pp's numbers: its speed-up over mp against the ideal, and its measured bubble
against the schedule's theory, both from pp and mp runs alternated round by round.

pp runs in 2 worker processes that keep one process group for every round; mp runs in this
process. ``fidelity.bubble`` holds the bubble check; ``fidelity.loops`` the comparisons against
hand-written loops.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from bench.experiments.fidelity.bubble import BubbleCheck, PipelineRound, bubble_checks
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
from bench.harness.ranks import become_rank, rank_context, torch_threads
from bench.harness.runner import step_times_ms, train
from bench.predict.costs import CostSource
from bench.predict.explain import GapStep, mp_twin, pipeline_gap
from bench.predict.scenario import scenario_for
from strategies.distributed import (
    destroy_process_group,
    init_process_group,
    torchrun_topology,
)
from strategies.model_parallel import ModelParallelStrategy
from strategies.pipeline import PipelineStrategy
from strategies.schedules import ideal_speedup

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext
    from multiprocessing.queues import Queue

log = logging.getLogger(__name__)

Predictor = tuple[CostSource, str]
"""A calibration of this machine for mlp small, and where it came from (for the record)."""


PP_STAGES = 2
PP_BATCH = 256
SPEEDUP_TARGET = 0.85
"""The share of the ideal p*m/(m+p-1) speed-up that pp should reach over mp on one pp rank's threads."""
CUDA_PRESET, CUDA_PP_BATCH = "large", 1024
"""mlp large on GPUs: width 8192, so that a micro-batch of 128 rows is a few hundred microseconds of
matmul per layer and not a handful of kernel launches (mlp small there times the launches)."""


@dataclass(frozen=True)
class PipelineSpeedup(FigureAndLine):
    """The pipeline's median step time against the stages run in turn, on the same micro-batches."""

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
    interval: Interval | None = None
    """The speed-up's interval over the rounds (``pooled_ratio``); None from one round."""
    predicted: tuple[GapStep, ...] = ()
    """The calibrated model's account of the gap to the ideal (bench/predict/explain.py), PREDICTED;
    empty where no calibration was given."""
    prediction_source: str | None = None
    mp_microbatches: int | None = None
    """The micro-batches of the mp it is held against, where not ``microbatches``: 1 on GPUs (``mp_microbatches``)."""

    @property
    def speedup(self) -> float:
        return self.mp_ms / self.pp_ms

    @property
    def share(self) -> float:
        return self.speedup / self.ideal

    @property
    def share_interval(self) -> Interval | None:
        return None if self.interval is None else (self.interval[0] / self.ideal, self.interval[1] / self.ideal)

    @property
    def settled(self) -> bool | None:
        """False where the share's interval straddles the target: the rounds do not decide the verdict."""
        if self.target_share is None:
            return None
        return settled(self.share_interval, self.target_share, float("inf"))

    @property
    def target(self) -> str:
        return "none (for information)" if self.target_share is None else f"at least {self.target_share:.0%} of ideal"

    @property
    def met(self) -> bool | None:
        return None if self.target_share is None else self.share >= self.target_share

    def _figure(self, target: str | None = None) -> str:
        share = self.share_interval
        spread = "" if share is None else f" [{share[0]:.0%}, {share[1]:.0%}]"
        headline = (f"speed-up {self.speedup:.2f}{interval_text(self.interval, 2)} = {self.share:.0%}{spread} "
                    f"of the ideal {self.ideal:.2f}")
        return figure_text(headline, f"pp {self.pp_ms:.1f} ms, mp {self.mp_ms:.1f} ms per step", target)

    def record_fields(self) -> dict[str, Any]:
        predicted = self.predicted[-1].predicted_speedup if self.predicted else None
        return {"comparison": "pp-vs-mp", "name": self.name, "speedup": self.speedup, "ideal_speedup": self.ideal,
                "share_of_ideal": self.share, "speedup_interval": self.interval,
                "share_of_ideal_interval": self.share_interval, "suite_ms": self.pp_ms, "baseline_ms": self.mp_ms,
                "microbatches": self.microbatches, "mp_threads": self.mp_threads,
                "mp_microbatches": self.mp_microbatches or self.microbatches, "target": self.target,
                "met": self.met, "settled": self.settled, **self.setup.record_fields(),
                "predicted_speedup": predicted,
                "predicted_share_of_ideal": None if predicted is None else predicted / self.ideal,
                "predicted_steps": [{"added": s.added, "predicted_speedup": s.predicted_speedup,
                                     "predicted_share_of_ideal": s.predicted_speedup / self.ideal,
                                     "predicted_pp_ms": s.pp_ms, "predicted_mp_ms": s.mp_ms}
                                    for s in self.predicted] or None,
                "prediction_source": self.prediction_source}


def pipeline_config(config: RunConfig) -> RunConfig:
    """The configuration both sides of pp-vs-mp share (``config``'s other options): mlp small on CPUs,
    mlp large on GPUs (``CUDA_PRESET``)."""
    cuda = config.run.accelerator == "cuda"
    return config.with_flags(model="mlp", preset=CUDA_PRESET if cuda else "small",
                             batch_size=CUDA_PP_BATCH if cuda else PP_BATCH, balance="params",
                             devices=PP_STAGES, optimizer="sgd", lr=0.01)


def mp_microbatches(accelerator: str, microbatches: int) -> int:
    """The micro-batches of the mp that pp with ``microbatches`` is held against.

    The ideal p*m/(m+p-1) is over stages run one after another. On a CPU mp with M micro-batches does
    run so (each op returns when it is done), and it feeds the same micro-batches as pp. On CUDA its
    launches return at once, so stage 2 computes micro-batch 1 while stage 1 computes micro-batch 2:
    mp with M micro-batches already overlaps (strategies/model_parallel.py) and pp's speed-up over it
    sits near 1. Only one micro-batch leaves nothing to overlap there.
    """
    return 1 if accelerator == "cuda" else microbatches


PIPELINED, IN_TURN = PipelineStrategy.name, ModelParallelStrategy.name
"""The two sides compared: the same stages pipelined over processes, and run in turn in one process."""
ON_ALL_CORES = f"{IN_TURN}-all"
"""The in-turn side again with every core's threads (CPUs only)."""


def pipeline_sides(accelerator: str, per_rank: int, all_threads: int) -> dict[str, int]:
    """The runs alternated each round and the threads each computes with: pp, mp on one pp rank's
    threads and, on CPUs only, mp on all the cores (on GPUs threads do not set a step's time)."""
    sides = {PIPELINED: per_rank, IN_TURN: per_rank}
    if accelerator != "cuda":
        sides[ON_ALL_CORES] = all_threads
    return sides


def side_config(base: RunConfig, side: str, microbatches: int) -> RunConfig:
    """The (unresolved) configuration of one side of the round for pp's ``microbatches``."""
    if side == PIPELINED:
        return base.with_flags(strategy=PIPELINED, microbatches=microbatches)
    return base.with_flags(strategy=IN_TURN, microbatches=mp_microbatches(base.run.accelerator, microbatches))


def pp_vs_mp(
    config: RunConfig, rounds: int, microbatches: tuple[int, ...] = (4, 8), predictor: Predictor | None = None
) -> tuple[list[PipelineSpeedup], list[BubbleCheck]]:
    """``pp`` on 2 processes against ``mp`` in this process: mlp small, balanced, M micro-batches;
    and pp's measured bubble against its theoretical one where M >= 4p.

    Both split the same blocks the same way ([4, 5] by parameter count: four hidden layers on
    each side, the small head with the second); mp runs the stages one after another, pp overlaps
    them, so the ideal speed-up is p*m/(m+p-1). On CPUs mp feeds the same micro-batches; on GPUs
    one, the whole batch (``mp_microbatches``: CUDA would overlap mp's own micro-batches). With a ``predictor``
    (a calibration of this machine and where it came from) each speed-up carries the calibrated model's
    account of what keeps it from the ideal.

    Threads, for an honest comparison on a CPU: each pp rank gets cores // 2 threads, as the
    launcher gives it. Against that, mp is measured twice. With the same threads as one pp rank
    (one emulated device working at a time, as on GPUs), the ratio isolates what pipelining buys;
    this is the figure held to the ideal. With all the cores (the same total as pp), mp's stages
    get intra-op parallelism instead, and the ratio says whether pipelining beats that.
    """
    # 256 samples: micro-batches of 32 to 64, big enough that a stage's matmuls set its time. At 64
    # (micro-batches of 8) every micro-batch's weight-gradient traffic dominated: mp itself slowed from
    # 136 to 221 ms going from M=4 to 8, and pp reached 65% of the ideal against 80% at 256.
    base = pipeline_config(config)
    assert base.run.batch_size is not None, "pipeline_config sets batch_size"
    setup = Setup(base.workload.model, base.workload.preset, PP_STAGES, base.run.accelerator, base.run.batch_size)
    per_rank = threads_per_process(PP_STAGES) if config.run.accelerator == "cpu" else torch.get_num_threads()
    sides = pipeline_sides(base.run.accelerator, per_rank, torch.get_num_threads())
    mp_times, pp_rounds = _pipeline_rounds(base, sides, rounds, microbatches)
    speedups = []
    labels = {IN_TURN: (f"{per_rank} thread(s), as one pp rank", SPEEDUP_TARGET),
              ON_ALL_CORES: (f"{sides.get(ON_ALL_CORES)} threads", None)}
    if base.run.accelerator == "cuda":
        labels[IN_TURN] = ("one micro-batch (CUDA overlaps mp's micro-batches)", SPEEDUP_TARGET)
    for m in microbatches:
        pp_times = [r.step_times_ms for r in pp_rounds[m]]
        pp_ms = statistics.median(t for r in pp_times for t in r)
        mp_m = mp_microbatches(base.run.accelerator, m)
        for side in (s for s in sides if s != PIPELINED):
            label, target = labels[side]
            name = f"pp vs mp, {PP_STAGES} stages, M={m}, mp on {label}"
            mp_ms = statistics.median(t for r in mp_times[side, m] for t in r)
            _, interval = pooled_ratio(mp_times[side, m], pp_times)
            predicted: tuple[GapStep, ...] = ()
            if predictor is not None:
                pp = dataclasses.replace(scenario_for(resolve(side_config(base, PIPELINED, m))), threads=per_rank)
                mp = dataclasses.replace(mp_twin(pp, sides[side]), microbatches=mp_m)
                predicted = tuple(pipeline_gap(predictor[0], pp, mp))
            speedups.append(PipelineSpeedup(name, setup, m, sides[side], pp_ms, mp_ms, ideal_speedup(PP_STAGES, m),
                                            target, interval, predicted, predictor[1] if predictor else None,
                                            mp_microbatches=mp_m))
    return speedups, bubble_checks(pp_rounds, setup, base.pipeline.schedule)


def _pipeline_rounds(
    base: RunConfig, sides: dict[str, int], rounds: int, microbatches: tuple[int, ...]
) -> tuple[dict[tuple[str, int], list[list[float]]], dict[int, list[PipelineRound]]]:
    """Alternates pp (in 2 worker processes that keep one process group) and mp's sides, round by
    round; returns mp's step times in each round per (side, M) and pp's rounds per M."""
    mp_times: dict[tuple[str, int], list[list[float]]] = {
        (s, m): [] for s in sides if s != PIPELINED for m in microbatches}
    pp_rounds: dict[int, list[PipelineRound]] = {m: [] for m in microbatches}
    ctx = cast("ForkServerContext", rank_context())  # typed a BaseContext, which typeshed gives no Process
    with tempfile.TemporaryDirectory() as folder:
        inboxes = [ctx.Queue() for _ in range(PP_STAGES)]
        outbox = ctx.Queue()
        workers = [ctx.Process(target=_pp_worker, args=(r, inboxes[r], outbox, folder, sides[PIPELINED]))
                   for r in range(PP_STAGES)]
        for w in workers:
            w.start()
        try:
            for r, order in enumerate(alternate(list(sides), rounds)):
                for m in microbatches:
                    for side in order:
                        config = resolve(side_config(base, side, m))
                        if side == PIPELINED:
                            for inbox in inboxes:
                                inbox.put(config)
                            pp_rounds[m].append(outbox.get(timeout=base.measure.timeout_s))
                        else:
                            mp_times[side, m].append(_mp_step_times(config, sides[side]))
                log.info("round %d/%d done", r + 1, rounds)
        finally:
            for inbox in inboxes:
                inbox.put(None)
            for w in workers:
                w.join(timeout=60)
    return mp_times, pp_rounds


def _mp_step_times(config: RunConfig, threads: int) -> list[float]:
    with torch_threads(threads):
        return step_times_ms(train(config).ranks)


def _pp_worker(
    rank: int, inbox: Queue[RunConfig | None], outbox: Queue[PipelineRound], folder: str, threads: int
) -> None:
    """One pp rank that keeps its process group and trains each config it is sent until None;
    rank 0 sends back each run's step times and bubble figures."""
    become_rank(rank, PP_STAGES, folder)
    torch.set_num_threads(threads)
    group_made = False
    try:
        while (config := inbox.get()) is not None:
            if not group_made:
                init_process_group(torchrun_topology(config.run.accelerator), config.measure.timeout_s)  # pp keeps it
                group_made = True
            result = train(config)
            if rank == 0:
                fields = result.strategy_fields
                bubbles = (fields.get("measured_bubble_fraction"), fields.get("theoretical_bubble_fraction"))
                outbox.put(PipelineRound(step_times_ms(result.ranks), *bubbles))
    finally:
        if group_made:
            destroy_process_group()
