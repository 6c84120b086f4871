"""Communication bytes per step, counted from torch.profiler's record of the backend's own calls.

Every collective and send a strategy makes, whether from DDP's C++ reducer, FSDP2, DTensor or
torch.distributed.pipelining, reaches the process group as one ``gloo:<op>`` or ``nccl:<op>`` event
that carries its input tensors' shapes and dtypes. The count is the payload a rank hands to the
backend in floating point (an all-reduce's buffer once, not the ring's 2(n-1)/n on the wire); receives are left out,
so a pipeline's activation is counted once, by the rank that sends it (a broadcast, such as DDP's of
BatchNorm buffers, counts its buffer on every rank: the event does not say which rank is the root).

One untimed warm-up step is counted (the last one: the first also holds lazy set-up, such as a
pipeline's shape inference), so the profiler's overhead never reaches a timed step.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from torch.profiler import ProfilerActivity, profile

BACKENDS = ("gloo:", "nccl:")
SETTLE_S = 0.05
"""How long the count waits after its step for the backend's threads to close their records."""
NOT_SENT = ("recv", "barrier")
"""Backend calls whose inputs are not payload this rank sends."""

_FLOAT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2}
"""The payload is floating point (gradients, parameters, activations); integer messages are control,
such as the bucket order DDP broadcasts once after its first step, and are left out."""


def _element_bytes(dtype: str) -> int:
    return _FLOAT_BYTES.get(dtype, 1 if dtype.startswith("c10::Float8") else 0)


def counted_bytes(events: list[tuple[str, list[list[int]], list[str]]]) -> int:
    """The payload of a step's backend calls: (name, input shapes, input dtypes) per profiler event."""
    total = 0
    for name, shapes, dtypes in events:
        if not name.startswith(BACKENDS) or any(word in name for word in NOT_SENT):
            continue
        for shape, dtype in zip(shapes, dtypes, strict=False):
            total += math.prod(shape) * _element_bytes(dtype) if shape else 0
    return total


class StepBytes:
    """Counts the backend payload of the steps run inside ``with counter.counting():``."""

    def __init__(self) -> None:
        self.bytes: int | None = None

    @contextmanager
    def counting(self, cuda: bool) -> Iterator[None]:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        profiler = profile(activities=activities, record_shapes=True)
        with _quiet_stderr():  # kineto logs its start and stop to stderr on every rank
            profiler.start()
        try:
            yield
        finally:
            # A backend call's record ends on the backend's own thread, after the work it waited for was marked
            # done: stopped at once, torch 2.11's profiler dropped ddp's all-reduce on 3 of 6 runs.
            time.sleep(SETTLE_S)
            with _quiet_stderr():
                profiler.stop()
                # the events with their dtypes: FunctionEvent gained dtypes only after torch 2.11
                recorded = profiler.profiler.kineto_results if profiler.profiler else None
                events = [(e.name(), e.shapes(), e.dtypes()) for e in (recorded.events() if recorded else [])]
        self.bytes = counted_bytes(events)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def mean_bytes(per_rank: list[int | None]) -> float | None:
    """Bytes per step per rank, averaged over the ranks (a pipeline's last stage sends nothing forward)."""
    counted = [b for b in per_rank if b is not None]
    return sum(counted) / len(counted) if counted else None
