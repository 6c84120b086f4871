"""What a device holds by kind over a training step, and the total at the moment the step peaks.

A step's memory is not the sum of every kind's own peak: the activations are freed by the time the gradients are
whole, and that sum put the transformer's totals 20-115% above what torch's MemTracker measured on the 2-core VM.
The total is instead what the step holds at its largest moment, each moment what is held beside the parameters
and the optimizer state (held from the second step on, as in every timed step) and anything else held throughout
(buffers, DDP's buckets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strategies.cost_model import FP32

if TYPE_CHECKING:
    from models.backward_peaks import BackwardPeak

FORWARD_PEAK = ("activations", "gathered_parameters")
"""What a step holds at the end of its forward beyond what it always holds: every saved activation, and
under FSDP the parameters its all-gathers brought in."""
STEP_PEAK = ("gradients",)
"""What it holds at the optimizer step instead: the whole gradients. DDP's buckets (its ``temporaries``) are held
beside both."""


@dataclass(frozen=True)
class BlockHeld:
    """One block's bytes on a rank as the step's backward meets them."""

    gradients: float
    """Its gradients (this rank's share)."""
    saved: float
    """What its forward keeps for its backward (the loss's with the last block)."""
    output: float
    """Its output, and so in the backward the gradient the next block hands it."""


def peak_bytes(peak: BackwardPeak, samples: float, element_bytes: int = FP32) -> tuple[float, float, float]:
    """``peak``'s own activations, gradients made and temporaries at ``samples``, in a computation of
    ``element_bytes`` a value (counted in fp32; 2 under bf16 autocast, whose activations and their gradients are
    half as large, as a GPU profile's saved bytes are)."""
    scale = element_bytes / FP32
    return (peak.activations.at(samples) * scale, peak.gradients.at(samples) * scale,
            peak.temporaries.at(samples) * scale)


def moments_by_kind(blocks: Sequence[BlockHeld], peaks: Sequence[BackwardPeak] = (), samples: float = 0.0,
                    element_bytes: int = FP32) -> list[dict[str, float]]:
    """Bytes of activations, gradients and temporaries held at each moment a step may peak, beyond what it always
    holds: the forward's end (every saved activation); the loss's backward, where cross-entropy (every model here
    ends in one) has freed the log-probabilities it saved and holds two gradients of their size; each block's
    backward; and the optimizer step (the whole gradients).

    A block's backward, where ``peaks`` counted it (one per block, read at ``samples``): the earlier blocks'
    activations and the later blocks' gradients, with what the block itself held at its largest moment. Else at its
    end: its own and the later blocks' gradients made, the earlier blocks' activations and its own still held, the
    gradient of its input being made. Measured by MemTracker on the 2-core VM (small models, one device; MiB): the
    cnn peaks in its fourth block's backward (138.78; the forward's end and the step gave 127.96, the blocks' ends
    138.61), the transformer in its loss's backward (106.39; 102.31 before, 106.31), the mlp in its first block's
    backward (96.71, of which 0.25 the batch: 96.21 before, 96.46). At the blocks' ends the temporaries of the
    transformer's layers went uncounted: DDP's 17.62 MiB on 2 ranks (its buckets' 14.12 and the last layer's 3.50)
    predicted 14.12."""
    saved = [b.saved for b in blocks]
    gradients = [b.gradients for b in blocks]
    last = blocks[-1].output if blocks else 0.0
    moments = [{"activations": sum(saved)}, {"activations": sum(saved) - last, "temporaries": 2 * last}]
    for i in reversed(range(len(blocks))):
        if peaks:
            activations, made, temporaries = peak_bytes(peaks[i], samples, element_bytes)
            moments.append({"activations": sum(saved[:i]) + activations,
                            "gradients": sum(gradients[i + 1:]) + made, "temporaries": temporaries})
        else:
            moments.append({"activations": sum(saved[:i + 1]), "gradients": sum(gradients[i:]),
                            "temporaries": blocks[i - 1].output if i else 0.0})
    moments.append({"gradients": sum(gradients)})
    return moments


def by_kind(parameters: float, gradients: float, optimizer: float, activations: float,
            **more: float) -> dict[str, int]:
    """Bytes by kind (fp32 state counted in elements, the rest in bytes) with their ``total``, the larger of the
    forward's end and the optimizer step (``at_largest_moment`` walks the backward too)."""
    kinds = {"parameters": FP32 * parameters, "gradients": FP32 * gradients, "optimizer_state": FP32 * optimizer,
             "activations": activations, **more}
    return with_total({k: int(v) for k, v in kinds.items()})


def at_largest_moment(kinds: dict[str, int], held: Sequence[BlockHeld], peaks: Sequence[BackwardPeak] = (),
                      samples: float = 0.0, element_bytes: int = FP32) -> dict[str, int]:
    """``kinds`` with the total of the largest of ``moments_by_kind``; ``held``: each block's share of the
    gradients and activations. Where ``peaks`` counted the blocks' backwards, the temporaries are those held
    throughout (DDP's buckets) and the largest moment's, as the tracker reads them at the step's peak;
    ``element_bytes``: the computation's bytes a value (``peak_bytes``)."""
    moments = moments_by_kind(held, peaks, samples, element_bytes)
    out = with_total(kinds, [sum(moment.values()) for moment in moments])
    if peaks:
        largest = max(moments, key=lambda moment: sum(moment.values()))
        out["temporaries"] = int(kinds.get("temporaries", 0) + largest.get("temporaries", 0.0))
    return out


def with_total(kinds: dict[str, int], moments: Sequence[float] | None = None) -> dict[str, int]:
    """``kinds`` with ``total``: what the step always holds (parameters, optimizer state, buffers, and any kind
    named in neither ``FORWARD_PEAK`` nor ``STEP_PEAK``, DDP's buckets among them: outside the total, they once put
    it 24% under the tracker's figure for ddp on the small mlp) and the largest of ``moments``; without them, the
    larger of the forward's end (``FORWARD_PEAK``) and the optimizer step (``STEP_PEAK``), which missed the cnn's
    peak in its backward by 7.5% and the transformer's in its loss's backward by 3.8% (single, small)."""
    rest = {k: int(v) for k, v in kinds.items() if k != "total"}
    always = sum(v for k, v in rest.items() if k not in FORWARD_PEAK + STEP_PEAK)
    forward = sum(rest.get(k, 0) for k in FORWARD_PEAK)
    step = sum(rest.get(k, 0) for k in STEP_PEAK)
    return {**rest, "total": int(always + (max(moments) if moments else max(forward, step)))}
