"""What each block holds at its own backward's largest moment, counted on the meta device by torch's MemTracker.

A block's backward peaks inside it, not at its edges: the transformer's layers as the MLP's second Linear makes
its gradients (its weight's gradient and its input's, 4x the model's width, beside every activation still held),
the small cnn's fourth block after it has freed its activations and made most of its gradients. What autograd
holds there besides the earlier blocks' activations and the later blocks' gradients depends on the block's
insides, which the cost models do not see; counted once here, it is read at any batch.

Counted on the meta device (shapes, no memory, no arithmetic): the small transformer's last layer at 4 samples
a rank held 2.25 MiB of temporaries at its peak here, as FSDPMemTracker measured in the 4-rank ZeRO-3 runs and
MemTracker as the excess over DDP's buckets in ZeRO-1's; the cnn's fourth block at 32 samples 1.78 MiB, as
MemTracker measured on one device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from models.sizes import saved_bytes_per_sample
from models.spec import ModelSpec


@dataclass(frozen=True)
class Bytes:
    """Bytes by samples: ``fixed`` + ``per_sample`` x samples."""

    fixed: float
    per_sample: float

    def at(self, samples: float) -> float:
        return max(0.0, self.fixed + self.per_sample * samples)


@dataclass(frozen=True)
class BackwardPeak:
    """What one block holds at its backward's largest moment beyond the earlier blocks' activations and the later
    blocks' gradients (for one device, whole batch: data parallelism reads it at a rank's samples)."""

    activations: Bytes
    """Its own activations not yet freed."""
    gradients: Bytes
    """Its own parameters' gradients already made."""
    temporaries: Bytes
    """Gradients of its activations and of its weights not yet accumulated, as the tracker calls them."""


def backward_peaks(spec: ModelSpec, samples: tuple[int, int]) -> tuple[BackwardPeak, ...]:
    """Per block of ``spec``, its ``BackwardPeak`` as a line through counts at ``samples`` (two different sizes,
    the ones a prediction reads, so that it is exact there)."""
    small, large = sorted(samples)
    if small == large:
        large = 2 * small
    at_small, at_large = _count(spec, small), _count(spec, large)

    def line(kind: int, i: int) -> Bytes:
        per_sample = (at_large[i][kind] - at_small[i][kind]) / (large - small)
        return Bytes(at_small[i][kind] - per_sample * small, per_sample)

    return tuple(BackwardPeak(line(0, i), line(1, i), line(2, i)) for i in range(len(at_small)))


def _count(spec: ModelSpec, samples: int) -> list[tuple[float, float, float]]:
    """Per block, (own activations, own gradients, temporaries) in bytes at its backward's largest moment."""
    from torch.distributed._tools.mem_tracker import MemTracker

    blocks = copy.deepcopy(spec.blocks).to("meta")
    saved = [s * samples for s in saved_bytes_per_sample(spec)]
    gradients = [sum(p.numel() * p.element_size() for p in block.parameters()) for block in blocks]
    names = {f"{type(blocks).__name__}.{i}": i for i in range(len(blocks))}
    peaks: dict[int, dict[str, int]] = {}

    class AtEachBlocksPeak(MemTracker):
        def _update_peak_stats(self, peak_state: Any) -> None:  # noqa: ANN401 - torch's private _State
            super()._update_peak_stats(peak_state)
            block = next((names[p] for p in self._mod_tracker.parents if p in names), None)
            if block is None or not self._mod_tracker.is_bw:
                return
            for snapshot in self._curr_mem_snap.values():
                held = {str(getattr(k, "value", k)): int(v) for k, v in snapshot.items()}
                if held["Total"] > peaks.get(block, {}).get("Total", -1):
                    peaks[block] = held

    inputs, targets = spec.make_batch(samples, torch.Generator().manual_seed(0))
    inputs, targets = inputs.to("meta"), targets.to("meta")
    tracker = AtEachBlocksPeak()
    tracker.track_external(blocks, inputs, targets)
    with tracker:
        spec.loss_fn(blocks(inputs), targets).backward()
    out = []
    for i in range(len(blocks)):
        held = peaks.get(i, {})
        own_activations = held.get("Activation", 0) - sum(saved[:i])
        own_gradients = held.get("Gradient", 0) - sum(gradients[i + 1:])
        out.append((float(max(0, own_activations)), float(max(0, own_gradients)), float(held.get("Temp", 0))))
    return out
