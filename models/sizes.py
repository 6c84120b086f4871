"""What a model's blocks hold, counted on the meta device: shapes only, no memory, no arithmetic."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from models.spec import COLWISE, ModelSpec

COUNT_BATCH = 2
"""Samples in a count: BatchNorm in training mode needs more than one value per channel."""


def saved_bytes_per_sample(spec: ModelSpec) -> list[float]:
    """Per block, the bytes its forward saves for backward, per sample (the loss's with the last block).

    Parameters that autograd saves (a Linear keeps its weight for the input's gradient) are state,
    not activations, and are left out; so are views of them."""
    return _saved_per_sample(spec, {})


def tp_split_saved_bytes_per_sample(spec: ModelSpec, styles: dict[str, str]) -> list[float]:
    """Per block, the part of ``saved_bytes_per_sample`` that tensor parallelism splits over its ranks: what
    is saved from a column-wise layer's output up to its row-wise layer's input (the attention's heads, the
    MLP's hidden), of which each rank computes and keeps its share. ``styles``: the plan's, by module path."""
    return _saved_per_sample(spec, styles)


def _saved_per_sample(spec: ModelSpec, styles: dict[str, str]) -> list[float]:
    """Per block, the bytes saved for backward per sample; with ``styles``, only those saved between a
    column-wise layer's output and the end of the row-wise layer after it."""
    blocks = copy.deepcopy(spec.blocks).to("meta")
    parameters = {id(p) for p in blocks.parameters()}
    counts = [0] * len(blocks)
    current = 0
    inside = [not styles]  # counting everything, or only between a column-wise output and a row-wise end
    for path, style in styles.items():
        flag = style == COLWISE
        blocks.get_submodule(path).register_forward_hook(lambda *_, flag=flag: inside.__setitem__(0, flag))
    # Held until the count ends, so that no id is reused: a tensor saved by two ops (a ReLU's output,
    # saved by the ReLU and the next Linear) is one tensor in memory and is counted once.
    seen: dict[int, torch.Tensor] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) in parameters or id(getattr(tensor, "_base", None)) in parameters or id(tensor) in seen:
            return tensor
        seen[id(tensor)] = tensor
        if inside[0]:
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
