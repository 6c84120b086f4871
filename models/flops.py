"""Model FLOPs per sample, counted by PyTorch's own flop counter rather than estimated by hand."""

from __future__ import annotations

import copy

import torch
from torch.utils.flop_counter import FlopCounterMode

from models.spec import ModelSpec

# Two samples, not one: BatchNorm in training mode needs more than one value per channel.
_COUNT_BATCH = 2


def train_flops_per_sample(spec: ModelSpec) -> int:
    """Forward + backward FLOPs of one sample (matmuls and convolutions, as torch counts them).

    The count runs on a copy of the model on the meta device: shapes only, no arithmetic, so
    it is instant even for ResNet-50 and never touches the real model's BatchNorm statistics.
    """
    blocks = copy.deepcopy(spec.blocks).to("meta")
    inputs, targets = spec.make_batch(_COUNT_BATCH, torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with counter:
        loss = spec.loss_fn(blocks(inputs.to("meta")), targets.to("meta"))
        loss.backward()
    return counter.get_total_flops() // _COUNT_BATCH
