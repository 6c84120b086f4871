"""Per-micro-batch compute spans of one step: what the bubble figures and a pipeline's timeline are made of.

Spans are taken where the compute is issued (a stage's forward, backward, weight backward),
never around communication, so that ``busy`` means computing and the rest of the step is the
bubble plus transfers. On CUDA the host clock would only see kernel *launches*; CUDA events
recorded on the stage's stream give the device's own start and end instead. They are read
after the step has been synchronized, which the runner does anyway before it reads its clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = "F", "B", "I", "W"
"""Span kinds: forward, full backward, and the input and weight halves of a split backward."""


@dataclass(frozen=True)
class Span:
    """One compute span of one micro-batch on one stage, in ms since the step started."""

    stage: int
    microbatch: int
    kind: str
    start_ms: float
    end_ms: float

    def as_dict(self, rank: int) -> dict[str, object]:
        return {"rank": rank, "stage": self.stage, "microbatch": self.microbatch, "kind": self.kind,
                "start_ms": round(self.start_ms, 4), "end_ms": round(self.end_ms, 4)}  # fmt: skip


class StepTimer:
    """Collects the spans of one step across the devices of this process."""

    def __init__(self) -> None:
        self._origin: dict[torch.device, object] = {}
        self._marks: list[tuple[int, int, str, torch.device, object, object]] = []

    def _now(self, device: torch.device) -> object:
        if device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(device))
            return event
        return time.perf_counter()

    def start(self, devices: tuple[torch.device, ...] | list[torch.device]) -> None:
        """Marks the step's origin on every device (the runner has just synchronized them)."""
        self._marks.clear()
        self._origin = {d: self._now(d) for d in set(devices)}
        # Ranks start their steps at different moments; the wall clock (shared by the processes
        # of a machine, NTP-close across machines) lines their timelines up afterwards.
        self.wall_start_s = time.time()

    @contextmanager
    def span(self, stage: int, microbatch: int, kind: str, device: torch.device) -> Iterator[None]:
        """Times the compute issued inside the block on ``device``."""
        begin = self._now(device)
        yield
        self._marks.append((stage, microbatch, kind, device, begin, self._now(device)))

    def spans(self) -> list[Span]:
        """The step's spans in issue order; synchronizes CUDA events, so call after the step."""
        out = []
        for stage, microbatch, kind, device, begin, end in self._marks:
            origin = self._origin[device]
            if device.type == "cuda":
                end.synchronize()  # type: ignore[attr-defined]
                start_ms = origin.elapsed_time(begin)  # type: ignore[attr-defined]
                end_ms = origin.elapsed_time(end)  # type: ignore[attr-defined]
            else:
                start_ms, end_ms = (begin - origin) * 1e3, (end - origin) * 1e3  # type: ignore[operator]
            out.append(Span(stage, microbatch, kind, start_ms, end_ms))
        return out


def busy_ms_by_stage(spans: list[Span]) -> dict[int, float]:
    """Total compute time of each stage in one step."""
    busy: dict[int, float] = {}
    for s in spans:
        busy[s.stage] = busy.get(s.stage, 0.0) + (s.end_ms - s.start_ms)
    return busy


class StepLog:
    """Per-step busy times of this process's stages, and the spans of one chosen (timed) step.

    Kept by both mp and pp and turned into ``rank_fields``; ``pipeline_fields`` combines them.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.step = 0
        self.busy_ms: list[dict[int, float]] = []
        """One {stage: busy ms} per timed step."""
        self.step_ms: list[float] = []
        """This process's own wall time of each timed step (start of train_step to synchronized end)."""
        self.timeline: list[Span] = []
        """The spans of the last timed step."""
        self.timeline_start_s = 0.0
        """Wall-clock time (s) at which that step started on this process."""

    def add(self, spans: list[Span], step_ms: float, wall_start_s: float = 0.0) -> None:
        if self.step >= self.warmup:
            self.busy_ms.append(busy_ms_by_stage(spans))
            self.step_ms.append(step_ms)
            self.timeline, self.timeline_start_s = spans, wall_start_s
        self.step += 1


def rank_timing_fields(log: StepLog, rank: int, devices: list[list[int]]) -> dict[str, object]:
    """This process's part of the pipeline figures; ``devices`` lists the stages each of its devices runs."""
    return {
        "rank": rank,
        "devices": devices,
        "busy_ms": [{int(k): v for k, v in b.items()} for b in log.busy_ms],
        "step_ms": log.step_ms,
        "timeline": [s.as_dict(rank) for s in log.timeline],
        "timeline_start_s": log.timeline_start_s,
    }


def pipeline_fields(per_rank: list[dict[str, object]]) -> dict[str, object]:
    """Bubble, imbalance and timeline of the whole pipeline from every rank's ``rank_timing_fields``.

    Per timed step, a device's bubble is 1 - (its stages' busy time) / (the step's time, the slowest
    rank's, as the runner counts it); the figures are medians over the timed steps.
    """
    steps = len(per_rank[0]["step_ms"])  # type: ignore[arg-type]
    step_ms = [max(r["step_ms"][i] for r in per_rank) for i in range(steps)]  # type: ignore[index]
    stage_busy: dict[int, list[float]] = {}
    device_bubble: list[float] = []
    for r in per_rank:
        for b in r["busy_ms"]:  # type: ignore[union-attr]
            for stage, ms in b.items():
                stage_busy.setdefault(stage, []).append(ms)
        for stages in r["devices"]:  # type: ignore[union-attr]
            per_step = [1 - sum(r["busy_ms"][i].get(s, 0.0) for s in stages) / step_ms[i] for i in range(steps)]  # type: ignore[index]
            device_bubble.append(statistics.median(per_step))
    busy = [statistics.median(stage_busy[s]) for s in sorted(stage_busy)]
    # One time axis for every rank: ms since the earliest rank started the recorded step.
    origin = min(r.get("timeline_start_s", 0.0) for r in per_rank)  # type: ignore[type-var]
    timeline = []
    for r in per_rank:
        shift = (r.get("timeline_start_s", 0.0) - origin) * 1e3  # type: ignore[operator]
        for span in r["timeline"]:  # type: ignore[union-attr]
            timeline.append({**span, "start_ms": round(span["start_ms"] + shift, 4),
                             "end_ms": round(span["end_ms"] + shift, 4)})  # fmt: skip
    mean_busy = sum(busy) / len(busy)
    return {
        "stage_busy_ms": busy,
        "measured_bubble_fraction_per_device": device_bubble,
        "measured_bubble_fraction": sum(device_bubble) / len(device_bubble),
        "stage_imbalance": max(busy) / mean_busy if mean_busy > 0 else None,
        "timeline": timeline,
    }


def synchronize(devices: Iterable[torch.device]) -> None:
    """Waits for queued GPU work, so that a clock read after it measures the work, not its launch
    (nothing to wait for on the CPU)."""
    for index in sorted({d.index or 0 for d in devices if d.type == "cuda"}):
        torch.cuda.synchronize(index)


def peak_bytes(devices: list[torch.device] | tuple[torch.device, ...]) -> list[int]:
    """Peak memory of each device: the allocator's peak on CUDA, the process's peak RSS on the CPU
    (every emulated stage of one process shares it)."""
    import resource
    import sys

    out = []
    for d in devices:
        if d.type == "cuda":
            out.append(torch.cuda.max_memory_allocated(d))
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out.append(rss if sys.platform == "darwin" else rss * 1024)
    return out
