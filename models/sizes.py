"""What a model's blocks hold, counted on the meta device: shapes only, no memory, no arithmetic."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from models.spec import ModelSpec

COUNT_BATCH = 2
"""Samples in a count: BatchNorm in training mode needs more than one value per channel."""


def saved_bytes_per_sample(spec: ModelSpec) -> list[float]:
    """Per block, the bytes its forward saves for backward, per sample (the loss's with the last block).

    Parameters that autograd saves (a Linear keeps its weight for the input's gradient) are state,
    not activations, and are left out; so are views of them."""
    blocks = copy.deepcopy(spec.blocks).to("meta")
    parameters = {id(p) for p in blocks.parameters()}
    counts = [0] * len(blocks)
    current = 0
    # Held until the count ends, so that no id is reused: a tensor saved by two ops (a ReLU's output,
    # saved by the ReLU and the next Linear) is one tensor in memory and is counted once.
    seen: dict[int, torch.Tensor] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) in parameters or id(getattr(tensor, "_base", None)) in parameters or id(tensor) in seen:
            return tensor
        seen[id(tensor)] = tensor
        counts[current] += tensor.numel() * tensor.element_size()
        return tensor

    inputs, targets = spec.make_batch(COUNT_BATCH, torch.Generator().manual_seed(0))
    x = inputs.to("meta")
    with saved_tensors_hooks(pack, lambda tensor: tensor):
        for current, block in enumerate(blocks):  # noqa: B007 - pack reads it
            x = block(x)
        spec.loss_fn(x, targets.to("meta"))
    return [c / COUNT_BATCH for c in counts]


def parameter_counts(blocks: nn.Sequential) -> list[int]:
    """Per block, its parameters' element count."""
    return [sum(p.numel() for p in block.parameters()) for block in blocks]


def tensor_counts(blocks: nn.Sequential) -> list[tuple[int, ...]]:
    """Per block, each parameter tensor's element count."""
    return [tuple(p.numel() for p in block.parameters()) for block in blocks]


def output_bytes_per_sample(spec: ModelSpec) -> list[float]:
    """Per block, the bytes of its output per sample: what crosses to the next block (a pipeline's transfer)."""
    blocks = copy.deepcopy(spec.blocks).to("meta")
    inputs, _ = spec.make_batch(COUNT_BATCH, torch.Generator().manual_seed(0))
    x, sizes = inputs.to("meta"), []
    for block in blocks:
        x = block(x)
        sizes.append(x.numel() * x.element_size() / COUNT_BATCH)
    return sizes
