"""Memory by kind: what a training step holds on each device, as parameters, gradients, optimizer state,
activations and temporaries, rather than what the Python process grew to.

A CPU process's peak RSS is mostly the runtime (``import torch`` alone is ~500 MiB), so it reads the
same for every strategy. torch's own ``MemTracker`` (``torch.distributed._tools.mem_tracker``) sees
every tensor the step allocates through the dispatcher, on CPU and CUDA alike, and sorts it by what it
is for. The runner tracks the first warm-up step, which is untimed (the tracker slows every op) and,
being the first, also allocates the optimizer's state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch

log = logging.getLogger(__name__)

KINDS = {"Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Optstate": "optimizer_state",
         "Activation": "activations", "Temp": "temporaries", "Other": "other", "Total": "total"}
"""MemTracker's reference types and the record's names for them (bytes, at the step's peak)."""


class MemoryByKind:
    """Tracks one step; ``peaks`` is then one {kind: bytes} per device the process used, at its peak."""

    def __init__(self, refusal: str | None = None) -> None:
        self.peaks: list[dict[str, object]] | None = None
        self.error: str | None = refusal
        """Why nothing is tracked (the strategy's refusal, or a torch without the tracker), else None."""

    @contextmanager
    def track(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        try:
            from torch.distributed._tools.mem_tracker import MemTracker

            tracker = MemTracker()
            tracker.track_external(model, optimizer)
        except Exception as exc:  # a torch without the tracker: the run goes on untracked
            self.error = f"{type(exc).__name__}: {exc}"
            yield
            return
        with tracker:
            yield
        self.peaks = [
            {"device": str(device), **{KINDS[k]: int(v) for k, v in snapshot.items() if k in KINDS}}
            for device, snapshot in sorted(tracker.get_tracker_snapshot("peak").items(), key=lambda kv: str(kv[0]))
        ]
