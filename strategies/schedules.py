"""Pipeline schedules as data and arithmetic: names, fitting rules, bubbles. No processes, no devices.

A pipeline of p stages fed m micro-batches fills and drains; while it does, some stages wait.
GPipe (Huang et al. 2019) and 1F1B (PipeDream-Flush, Narayanan et al. 2021) have the same bubble:

    p = 3, m = 4          F = forward, B = backward of micro-batch i, . = idle
    stage 0   F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3           busy m of m+p-1 slots
    stage 1   .  F0 F1 F2 F3 .  .  B0 B1 B2 B3 .            in each direction, so
    stage 2   .  .  F0 F1 F2 F3 B0 B1 B2 B3 .  .            bubble = (p-1)/(m+p-1)

(1F1B interleaves the backwards earlier to hold fewer activations, not to shrink the bubble.)
Interleaving v stages per rank (Megatron-LM, Narayanan et al. 2021) cuts each fill/drain slot to
1/v of a stage's work, so the bubble *time* is divided by v; as a fraction of the step that is
(p-1)/(v*m + p-1). Zero-bubble schedules (Qi et al. 2024) split the backward into input and weight
halves and fill the bubble with the latter; their bubble depends on the three halves' times, so
no single formula is given for them (None).

These formulas hold only at some sizes (interleaved: m a multiple of p). The bubble the records
carry replays each schedule's own order instead (``strategies/action_tables.py``), and is tested
against these formulas where they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class ScheduleInfo:
    """What the suite knows about one torch.distributed.pipelining schedule."""

    name: str
    """The --schedule name."""
    torch_class: str
    """The class in torch.distributed.pipelining; absent from an older torch means not offered."""
    multi_stage: bool
    """Takes a list of stages per rank (PipelineScheduleMulti) rather than one."""
    min_v: int = 1
    """Fewest stages per rank."""
    max_v: int | None = 1
    """Most stages per rank (None: no limit)."""
    v_shape: bool = False
    """Stages placed in a V (rank r holds stages r and 2p-1-r), else looped (r, r+p, r+2p, ...)."""
    min_microbatches_per_stage: int = 0
    """Micro-batches must be at least this many times the number of stages."""
    rounds: bool = False
    """torch's flexible-interleaving rule: m must be a multiple of max(1, m // p)."""
    interleaved_bubble: bool | None = False
    """Bubble formula: fill-drain (False), divided by v (True), or none known (None)."""
    splits_backward: bool = False
    """Runs each backward in two halves, input gradients (I) then weight gradients (W): zero-bubble schedules."""


SCHEDULES: tuple[ScheduleInfo, ...] = (
    ScheduleInfo("gpipe", "ScheduleGPipe", multi_stage=False),
    ScheduleInfo("1f1b", "Schedule1F1B", multi_stage=False, min_microbatches_per_stage=1),
    ScheduleInfo("interleaved-1f1b", "ScheduleInterleaved1F1B", True, min_v=2, max_v=None, rounds=True,
                 interleaved_bubble=True),
    ScheduleInfo("looped-bfs", "ScheduleLoopedBFS", True, min_v=2, max_v=None, interleaved_bubble=True),
    ScheduleInfo("interleaved-zb", "ScheduleInterleavedZeroBubble", True, max_v=None, rounds=True,
                 interleaved_bubble=None, splits_backward=True),
    ScheduleInfo("zbv", "ScheduleZBVZeroBubble", True, min_v=2, max_v=2, v_shape=True, interleaved_bubble=None,
                 splits_backward=True),
    ScheduleInfo("dualpipev", "ScheduleDualPipeV", True, min_v=2, max_v=2, v_shape=True,
                 min_microbatches_per_stage=1, interleaved_bubble=None, splits_backward=True),
)
BY_NAME = {s.name: s for s in SCHEDULES}


def available_schedules(pipelining: ModuleType | None = None) -> list[str]:
    """The schedules the installed torch offers, in the order above; [] without pipelining."""
    if pipelining is None:
        try:
            import torch.distributed.pipelining as pipelining
        except ImportError:  # a torch built without distributed
            return []
    return [s.name for s in SCHEDULES if hasattr(pipelining, s.torch_class)]


def schedule_info(name: str, available: list[str]) -> ScheduleInfo:
    """The schedule called ``name``; an unknown or absent one lists what this torch offers."""
    if name not in available:
        raise ValueError(f"unknown schedule {name!r}; this torch offers {', '.join(available) or 'none'}")
    return BY_NAME[name]


def check_schedule(info: ScheduleInfo, ranks: int, stages_per_rank: int, microbatches: int) -> None:
    """Raises ValueError, naming the numbers, when ``info`` cannot run p ranks x v stages on m micro-batches."""
    p, v, m = ranks, stages_per_rank, microbatches
    if v < info.min_v or (info.max_v is not None and v > info.max_v):
        wanted = f"exactly {info.min_v}" if info.min_v == info.max_v else f"at least {info.min_v}"
        raise ValueError(f"schedule {info.name!r} needs {wanted} stage(s) per rank, got --stages-per-rank {v}")
    stages = p * v
    if m < info.min_microbatches_per_stage * stages:
        raise ValueError(f"schedule {info.name!r} needs at least {stages} micro-batches ({p} ranks x {v} "
                         f"stages per rank), got --microbatches {m}")
    if info.rounds and m % max(1, m // p) != 0:
        rounds = max(1, m // p)
        raise ValueError(f"schedule {info.name!r} runs micro-batches in rounds of {p} ranks: "
                         f"--microbatches {m} is not a multiple of its {rounds} rounds (try {rounds * p})")


def check_microbatches(batch_size: int, microbatches: int) -> None:
    """Raises ValueError unless the batch splits into ``microbatches`` equal, non-empty micro-batches.

    Equal sizes are what make the mean of the micro-batch mean losses the batch's mean loss."""
    if microbatches > batch_size:
        raise ValueError(f"global batch {batch_size} has fewer samples than --microbatches {microbatches}")
    if batch_size % microbatches:
        raise ValueError(f"global batch {batch_size} is not divisible by {microbatches} micro-batches")


def stages_of_rank(rank: int, ranks: int, stages_per_rank: int, v_shape: bool = False) -> list[int]:
    """Global stage indices held by ``rank``, in the order torch's schedules expect.

    looped (p = 2, v = 2):  rank 0 -> [0, 2], rank 1 -> [1, 3]
    V shape (p = 2):        rank 0 -> [0, 3], rank 1 -> [1, 2]   (the loss lands on rank 0)
    """
    if v_shape:
        return [rank, 2 * ranks - 1 - rank]
    return [rank + ranks * k for k in range(stages_per_rank)]


def formula_bubble(info: ScheduleInfo, ranks: int, microbatches: int, stages_per_rank: int = 1) -> float | None:
    """The textbook idle fraction with equal stages and free communication (see the module docstring);
    right only where the formula's assumptions hold (``action_tables.theoretical_bubble`` always is)."""
    p, m = ranks, microbatches
    if info.interleaved_bubble is None:
        return None
    v = stages_per_rank if info.interleaved_bubble else 1
    return (p - 1) / (v * m + p - 1)


def fill_drain_bubble(stages: int, microbatches: int) -> float:
    """(p-1)/(m+p-1): GPipe's bubble, and mp's (p stages in one process, m = 1 is plain model parallel)."""
    return (stages - 1) / (microbatches + stages - 1)


def ideal_speedup(stages: int, microbatches: int) -> float:
    """p*m/(m+p-1): a p-stage pipeline's best speed-up over running the same stages one after another."""
    return stages * microbatches / (microbatches + stages - 1)


def clock_cycles(microbatches: int, stages: int) -> list[list[tuple[int, int]]]:
    """The forward wavefront of a one-process pipeline (torchgpipe's clock cycles).

    At clock t, stage s works on micro-batch t - s; each inner list is one clock's
    (micro-batch, stage) pairs. m = 3, n = 2:

        clock    0     1     2     3
        stage 0  F0    F1    F2
        stage 1        F0    F1    F2

    Issued in this order on CUDA, stage s+1's kernels for micro-batch i queue on its device while
    stage s runs micro-batch i+1 on its own, so the devices overlap.
    """
    return [[(t - s, s) for s in range(stages) if 0 <= t - s < microbatches] for t in range(microbatches + stages - 1)]
