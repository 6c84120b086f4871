"""Memory by kind: what a training step holds on each device, as parameters, gradients, optimizer state,
activations and temporaries, rather than what the Python process grew to.

A CPU process's peak RSS is mostly the runtime (``import torch`` alone is ~500 MiB), so it reads the
same for every strategy. torch's own ``MemTracker`` (``torch.distributed._tools.mem_tracker``) sees
every tensor the step allocates through the dispatcher, on CPU and CUDA alike, and sorts it by what it
is for. The runner tracks warm-up steps, which are untimed (the tracker slows every op), and keeps each
kind's larger figure: the first, where the optimizer's state and DDP's gradient buckets are allocated (the
buckets exist before any later step and the tracker, which sees what a step allocates, would miss them),
and the second where there is one, with the optimizer's state held through it as in every later step:
fsdp's peak, in the backward, is then 22 MB (the state) above the first step's (cnn small, 2 ranks, SGD
momentum: 114.2 MB against 91.8). The activations, the same every step, are the first step's: DDP rebuilds
its buckets in the second step's forward, which the tracker takes for activations (as large as the gradients);
they are counted back among that step's temporaries (``_larger``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torch.distributed._tools.mem_tracker import MemTracker

log = logging.getLogger(__name__)

KINDS = {"Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Optstate": "optimizer_state",
         "Activation": "activations", "Temp": "temporaries", "Other": "other", "Total": "total"}
"""MemTracker's reference types and the record's names for them (bytes)."""

FSDP_KINDS = {"Sharded Param": "parameters", "Unsharded Param": "gathered_parameters",
              "All Gather": "gathered_parameters", "Buffer": "buffers", "Sharded Grad": "gradients",
              "Unsharded Grad": "gradients", "OptState": "optimizer_state", "Activation": "activations",
              "Inputs": "activations", "Temp": "temporaries", "Reduce Scatter": "temporaries", "Total": "total"}
"""FSDPMemTracker's types, summed into the same names: a rank's own shards are its parameters; what an
all-gather brings in for one block's forward or backward is ``gathered_parameters``."""


STEADY_STEP = 1
"""The first step (0-based) that holds the optimizer's state from its start, as every later one does."""


def tracked_steps(warmup: int) -> tuple[int, ...]:
    """The warm-up steps the tracker follows (0-based): the first, and ``STEADY_STEP`` where an untracked warm-up
    step follows it. Tracking the last warm-up step slowed the next two timed steps: fsdp ZeRO-3 on the small
    mlp, 2 ranks, 3 sweep rounds, first timed steps 244-303 ms against 165-225 with the first step alone tracked
    and 151-176 with a third, untracked warm-up step."""
    if warmup < 1:
        return ()
    return (0, STEADY_STEP) if warmup > STEADY_STEP + 1 else (0,)


def tracked_steps_name(warmup: int) -> str:
    """``tracked_steps`` in the records' words."""
    return "first and second warm-up steps" if len(tracked_steps(warmup)) == 2 else "first warm-up step"


class MemoryByKind:
    """Tracks each of ``tracked_steps`` (one ``track`` each); ``peaks`` is then one {kind: bytes} per device the
    process used, each kind the larger over the steps (``_larger``).

    A tracker's "peak" snapshot is the breakdown at the one moment the total peaked (mid-backward,
    usually), when the gradients are half made and the optimizer has not run. So each kind is taken
    at the larger of its value at that moment and at the step's end, where parameters, gradients
    and optimizer state are all whole; ``total`` is the peak's. Activations peak as the forward ends and
    are freed by the step's end: they are read as the loss is computed, the loss's own saved tensors
    included, and the batch, which the step did not allocate, left out; both trackers agree there. Not at
    the modules' snapshots: FSDPMemTracker follows only the FSDP modules (it sees the loss's at no
    boundary) and, at a block's own peak, counts as activations a buffer the size of the block's gathered
    parameters that FSDP2's all-gather on gloo allocates and frees inside the block's forward (the cnn's
    last block on 2 ranks: 25.8 MB at its peak against 7.1 MB as the loss is computed, ddp's 7.1 MB; the
    excess of each block equal to its parameters' bytes). The batch is handed to the tracker as memory of its
    own ("other": the data's), so that no boundary counts it: MemTracker left alone counted it at some and not at
    others, and where a tp plan's first layer takes the batch (the mlp's) it came out as an activation (the small
    mlp's tp: 1.75 MiB on 2 ranks and 1.5 on 4, 0.25 MiB of it the batch; with the plan one block later, as
    predicted).
    """

    def __init__(self, steps: tuple[int, ...], refusal: str | None = None) -> None:
        self.steps = steps
        """The steps to track (``tracked_steps``)."""
        self.peaks: list[dict[str, Any]] | None = None
        self.error: str | None = refusal
        """Why nothing is tracked (the strategy's refusal, or a torch without the tracker), else None."""

    @contextmanager
    def track(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              loss_fn: torch.nn.Module | None = None, batch: tuple[torch.Tensor, ...] = ()) -> Iterator[None]:
        """Tracks what runs inside; ``loss_fn``: the step's loss module, where the activations are read; ``batch``:
        the step's inputs and targets, counted as other memory."""
        try:
            tracker, kinds = _tracker(model, optimizer)
            tracker.track_external(*batch)
        except Exception as exc:  # a torch without the tracker: the run goes on untracked
            self.error = f"{type(exc).__name__}: {exc}"
            yield
            return
        at_loss: list[dict] = []
        hook = loss_fn.register_forward_hook(
            lambda *_: at_loss.append(tracker.get_tracker_snapshot())) if loss_fn is not None else None
        try:
            with tracker:
                yield
                end = tracker.get_tracker_snapshot()
        finally:
            if hook is not None:
                hook.remove()
        peak = tracker.get_tracker_snapshot("peak")
        activations = _activation_peaks(tracker, kinds, at_loss)
        peaks = []
        for device, snapshot in sorted(peak.items(), key=lambda kv: str(kv[0])):
            by_kind = _by_kind(snapshot, end.get(device, {}), kinds)
            by_kind["activations"] = activations.get(device, 0)
            fields = dict(sorted(by_kind.items()))
            peaks.append({"device": str(device), "tracker": type(tracker).__name__, **fields})
        self.peaks = peaks if self.peaks is None else _larger(self.peaks, peaks)


def _larger(earlier: list[dict[str, Any]], later: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per device, each kind's larger figure over two tracked steps; the activations the earlier step's (see
    MemoryByKind), and what the later step's forward allocated beyond them (DDP's rebuilt buckets) its temporaries.

    DDP's buckets are made in the first step's backward, temporaries to the tracker, and made again in the second
    step's forward, activations to it; each kind's larger figure alone then took the first step's buckets for the
    temporaries, held at its optimizer step, and missed the transients beside them at every later step's peak (the
    small transformer, ddp on 4 ranks: 14.12 MiB tracked, 16.12 with the loss's gradients beside the buckets; the mlp
    on 2 ranks: 32.07, 36.20 with its first layer's gradients being made)."""
    by_device = {d["device"]: d for d in earlier}
    merged = []
    for device in later:
        before = by_device.get(device["device"], {})
        activations = before.get("activations", device.get("activations", 0))
        rebuilt = max(0, device.get("activations", 0) - activations)
        device = {**device, "temporaries": device.get("temporaries", 0) + rebuilt} if rebuilt else device
        larger = {k: max(v, before.get(k, v)) if isinstance(v, int) else v for k, v in device.items()}
        merged.append({**larger, "activations": activations})
    return merged


def _tracker(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[MemTracker, dict[str, str]]:
    """torch's FSDP-aware tracker for an FSDP2 model (it knows shards from gathered copies), else MemTracker."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return FSDPMemTracker(model, optimizer), FSDP_KINDS
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    # ZeroRedundancyOptimizer keeps its shard's state in the optimizer it wraps (``optim``), none in its own
    # ``state``: left unregistered, zero1's state went untracked from the second step on, its total 7.06 MiB under
    # (the small transformer on 2 ranks: 67.31 tracked, 74.38 with the wrapped optimizer registered)
    inner = getattr(optimizer, "optim", None)
    tracker.track_external(model, optimizer, *([inner] if isinstance(inner, torch.optim.Optimizer) else []))
    return tracker, KINDS


def _summed(snapshot: dict, kinds: dict[str, str]) -> dict[str, int]:
    """A tracker snapshot of one device as {record kind: bytes}."""
    out: dict[str, int] = {}
    for key, value in snapshot.items():
        name = kinds.get(str(getattr(key, "value", key)))
        if name is not None:
            out[name] = out.get(name, 0) + int(value)
    return out


def _activation_peaks(tracker: object, kinds: dict[str, str], at_loss: list[dict]) -> dict[object, int]:
    """Per device, the most activation bytes held as the loss was computed (``at_loss``, one snapshot per call
    of the loss); where the loss was never seen, at any module's boundary (the trackers snapshot every module
    before and after its forward and backward; their "peak" snapshots are left out, see MemoryByKind)."""
    snapshots = at_loss or [snapshot for stats in getattr(tracker, "memory_tracking", {}).values()
                            for state, held in stats.snapshots.items() if "Peak" not in str(state.value)
                            for snapshot in held]
    peaks: dict[object, int] = {}
    for snapshot in snapshots:
        for device, by_type in snapshot.items():
            held = _summed(by_type, kinds).get("activations", 0)
            peaks[device] = max(peaks.get(device, 0), held)
    return peaks


def _by_kind(peak: dict, end: dict, kinds: dict[str, str]) -> dict[str, int]:
    """{record kind: bytes}: each kind the larger of its sum at the peak and at the end; total the peak's."""
    at_peak, at_end = _summed(peak, kinds), _summed(end, kinds)
    merged = {k: max(at_peak.get(k, 0), at_end.get(k, 0)) for k in {*at_peak, *at_end}}
    merged["total"] = at_peak.get("total", 0)
    return dict(sorted(merged.items()))
