"""Per-micro-batch compute spans of one step: what the bubble figures and a pipeline's timeline are made of.

Spans are taken where the compute is issued (a stage's forward, backward, weight backward),
never around communication, so that ``busy`` means computing and the rest of the step is the
bubble plus transfers. On CUDA the host clock would only see kernel *launches*; CUDA events
recorded on the stage's stream give the device's own start and end instead. They are read
after the step has been synchronized, which the runner does anyway before it reads its clock.

Every rank hands its ``RankTiming`` to the reporting rank, which combines them with
``pipeline_fields``: the one contract between a stage's clock and the record.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from strategies.devices import synchronize

FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = "F", "B", "I", "W"
"""Span kinds: forward, full backward, and the input and weight halves of a split backward."""

Mark = float | torch.cuda.Event
"""A point in time: the host clock (s) on the CPU, a recorded event on CUDA."""


@dataclass(frozen=True)
class Span:
    """One compute span of one micro-batch on one stage, in ms since the step started."""

    stage: int
    microbatch: int
    kind: str
    start_ms: float
    end_ms: float

    def as_dict(self, rank: int) -> dict[str, Any]:
        return {"rank": rank, "stage": self.stage, "microbatch": self.microbatch, "kind": self.kind,
                "start_ms": round(self.start_ms, 4), "end_ms": round(self.end_ms, 4)}


def _now(device: torch.device) -> Mark:
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event
    return time.perf_counter()


def _elapsed_ms(origin: Mark, mark: Mark) -> float:
    if isinstance(origin, torch.cuda.Event) and isinstance(mark, torch.cuda.Event):
        mark.synchronize()
        return origin.elapsed_time(mark)
    assert isinstance(origin, float) and isinstance(mark, float)
    return (mark - origin) * 1e3


class StepTimer:
    """Collects the spans of one step across the devices of this process."""

    def __init__(self) -> None:
        self._origin: dict[torch.device, Mark] = {}
        self._marks: list[tuple[int, int, str, torch.device, Mark, Mark]] = []
        self.wall_start_s = 0.0
        """Wall clock at the step's start: ranks start their steps at different moments, and the
        wall clock (shared by a machine's processes, NTP-close across machines) lines them up."""

    def start(self, devices: Sequence[torch.device]) -> None:
        """Marks the step's origin on every device (the runner has just synchronized them)."""
        self._marks.clear()
        self._origin = {d: _now(d) for d in set(devices)}
        self.wall_start_s = time.time()

    @contextmanager
    def span(self, stage: int, microbatch: int, kind: str, device: torch.device) -> Iterator[None]:
        """Times the compute issued inside the block on ``device``."""
        begin = _now(device)
        yield
        self._marks.append((stage, microbatch, kind, device, begin, _now(device)))

    def spans(self) -> list[Span]:
        """The step's spans in issue order; synchronizes CUDA events, so call after the step."""
        return [
            Span(stage, microbatch, kind, _elapsed_ms(self._origin[d], begin), _elapsed_ms(self._origin[d], end))
            for stage, microbatch, kind, d, begin, end in self._marks
        ]


def busy_ms_by_stage(spans: list[Span]) -> dict[int, float]:
    """Total compute time of each stage in one step."""
    busy: dict[int, float] = {}
    for s in spans:
        busy[s.stage] = busy.get(s.stage, 0.0) + (s.end_ms - s.start_ms)
    return busy


@dataclass
class StepLog:
    """Per-step busy times of this process's stages, and the spans of one chosen (timed) step."""

    warmup: int
    step: int = 0
    busy_ms: list[dict[int, float]] = field(default_factory=list)
    """One {stage: busy ms} per timed step."""
    step_ms: list[float] = field(default_factory=list)
    """This process's own wall time of each timed step's schedule: from the start of train_step to
    its synchronized end, less the update and any time the strategy left out."""
    update_ms: list[float] = field(default_factory=list)
    """The update's time in each timed step: gradient scaling and the optimizer step."""
    timeline: list[Span] = field(default_factory=list)
    """The spans of the last timed step."""
    timeline_start_s: float = 0.0
    """Wall-clock time (s) at which that step started on this process."""

    @property
    def timing(self) -> bool:
        """True while the step under way is a timed one."""
        return self.step >= self.warmup

    def add(self, spans: list[Span], step_ms: float, wall_start_s: float = 0.0, update_ms: float = 0.0) -> None:
        if self.timing:
            self.busy_ms.append(busy_ms_by_stage(spans))
            self.step_ms.append(step_ms)
            self.update_ms.append(update_ms)
            self.timeline, self.timeline_start_s = spans, wall_start_s
        self.step += 1


@dataclass
class StepClock:
    """What ``timed_step`` hands its body: time to leave out of the pipeline's step (hybrid's
    reduction), and a clock for the update, which the bubble must not count as idle."""

    devices: Sequence[torch.device]
    excluded_ms: float = 0.0
    update_ms: float = 0.0

    @contextmanager
    def update(self) -> Iterator[None]:
        """Times the block as update (gradient scaling, the optimizer step); the devices are
        synchronized on both sides so that the schedule's kernels are not counted here."""
        synchronize(self.devices)
        start = time.perf_counter()
        yield
        synchronize(self.devices)
        self.update_ms += (time.perf_counter() - start) * 1e3


@contextmanager
def timed_step(timer: StepTimer, log: StepLog, devices: Sequence[torch.device]) -> Iterator[StepClock]:
    """The skeleton of every timed pipeline step: clock and spans start, the body runs, the devices
    are synchronized, and the step's spans, its schedule's wall time (less ``excluded_ms`` and the
    update) and the update's time go to ``log``."""
    start = time.perf_counter()
    timer.start(devices)
    clock = StepClock(devices)
    yield clock
    synchronize(devices)
    total_ms = (time.perf_counter() - start) * 1e3
    log.add(timer.spans(), total_ms - clock.excluded_ms - clock.update_ms, timer.wall_start_s, clock.update_ms)


@dataclass(frozen=True)
class RankTiming:
    """One process's part of the pipeline figures, sent to the reporting rank."""

    rank: int
    stages_by_device: list[list[int]]
    """The stages each of this process's devices runs."""
    busy_ms: list[dict[int, float]]
    step_ms: list[float]
    timeline: list[Span]
    timeline_start_s: float
    update_ms: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, log: StepLog, rank: int, stages_by_device: list[list[int]]) -> RankTiming:
        return cls(rank, stages_by_device, log.busy_ms, log.step_ms, log.timeline, log.timeline_start_s,
                   log.update_ms)


def pipeline_fields(per_rank: Sequence[RankTiming]) -> dict[str, Any]:
    """Bubble, imbalance and timeline of the whole pipeline from every rank's ``RankTiming``.

    Per timed step, a device's bubble is 1 - (its stages' busy time) / (the schedule's time, the
    slowest rank's); the figures are medians over the timed steps. The update (gradient scaling and
    the optimizer step) is not the schedule's idle time: it is its own share of the whole step.
    """
    steps = len(per_rank[0].step_ms)
    step_ms = [max(r.step_ms[i] for r in per_rank) for i in range(steps)]
    stage_busy: dict[int, list[float]] = {}
    device_bubble: list[float] = []
    for r in per_rank:
        for busy_of_step in r.busy_ms:
            for stage, ms in busy_of_step.items():
                stage_busy.setdefault(stage, []).append(ms)
        for stages in r.stages_by_device:
            per_step = [1 - sum(r.busy_ms[i].get(s, 0.0) for s in stages) / step_ms[i] for i in range(steps)]
            device_bubble.append(statistics.median(per_step))
    busy = [statistics.median(stage_busy[s]) for s in sorted(stage_busy)]
    # One time axis for every rank: ms since the earliest rank started the recorded step.
    origin = min(r.timeline_start_s for r in per_rank)
    timeline = []
    for r in per_rank:
        shift = (r.timeline_start_s - origin) * 1e3
        for span in r.timeline:
            timeline.append({**span.as_dict(r.rank), "start_ms": round(span.start_ms + shift, 4),
                             "end_ms": round(span.end_ms + shift, 4)})
    mean_busy = sum(busy) / len(busy)
    update_ms = [max((r.update_ms[i] if r.update_ms else 0.0) for r in per_rank) for i in range(steps)]
    return {
        "schedule_ms": statistics.median(step_ms),
        "update_ms": statistics.median(update_ms),
        "update_fraction": statistics.median(u / (s + u) for s, u in zip(step_ms, update_ms, strict=True)),
        "stage_busy_ms": busy,
        "measured_bubble_fraction_per_device": device_bubble,
        "measured_bubble_fraction": sum(device_bubble) / len(device_bubble),
        "stage_imbalance": max(busy) / mean_busy if mean_busy > 0 else None,
        "timeline": timeline,
    }
