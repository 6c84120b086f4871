"""What a model's blocks hold, counted on the meta device: shapes only, no memory, no arithmetic."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from models.spec import COLWISE, ModelSpec

COUNT_BATCH = 2
"""Samples in the smaller of a count's two passes: BatchNorm in training mode needs more than one value per
channel."""


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
    """Per block, what the bytes saved for backward grow by with each sample: counted at two batch sizes, so
    that what a block saves once per batch (BatchNorm's per-channel mean and inverse deviation) is not
    multiplied by the batch (the small cnn at 16 samples a device: 7.89 MB counted from 2 samples, 7.35 MB
    saved, 7.27 MB by the difference of two counts)."""
    small, large = _saved_bytes(spec, styles, COUNT_BATCH), _saved_bytes(spec, styles, 2 * COUNT_BATCH)
    return [(b - a) / COUNT_BATCH for a, b in zip(small, large, strict=True)]


def _saved_bytes(spec: ModelSpec, styles: dict[str, str], samples: int) -> list[int]:
    """Per block, the bytes saved for backward by a forward of ``samples``; with ``styles``, only those saved
    between a column-wise layer's output and the end of the row-wise layer after it.

    Memory holds storages: a tensor saved by two ops (a ReLU's output, saved by the ReLU and the next Linear)
    and the views of one storage (the attention's query, key and value, split from one projection) are one
    storage, counted once, whole (the transformer's layers: 10.5 MB a layer counted per tensor at 8 samples,
    8.9 MB per storage, as torch's MemTracker measures them)."""
    blocks = copy.deepcopy(spec.blocks).to("meta")
    parameters = {id(p.untyped_storage()) for p in blocks.parameters()}
    counts = [0] * len(blocks)
    current = 0
    inside = [not styles]  # counting everything, or only between a column-wise output and a row-wise end
    for path, style in styles.items():
        flag = style == COLWISE
        blocks.get_submodule(path).register_forward_hook(lambda *_, flag=flag: inside.__setitem__(0, flag))
    # Held until the count ends, so that no storage's id is reused (a tensor keeps its storage's
    # Python object alive, and its views share it).
    seen: dict[int, torch.Tensor] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if id(storage) in parameters or id(storage) in seen:
            return tensor
        seen[id(storage)] = tensor
        if inside[0]:
            counts[current] += storage.nbytes()
        return tensor

    inputs, targets = spec.make_batch(samples, torch.Generator().manual_seed(0))
    x, targets = inputs.to("meta"), targets.to("meta")
    # The batch is the data's, there before the step: what the first layer and the loss save of it (or of a
    # view of it) is not an activation the step allocates (bench/harness/memory.py measures it so).
    seen.update({id(t.untyped_storage()): t for t in (x, targets)})
    with saved_tensors_hooks(pack, lambda tensor: tensor):
        for current, block in enumerate(blocks):  # noqa: B007 - pack reads it
            x = block(x)
        spec.loss_fn(x, targets)
    return counts


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


def batch_bytes_per_sample(spec: ModelSpec) -> float:
    """The bytes of one sample of the batch, its inputs and targets: what a step holds as its data."""
    inputs, targets = spec.make_batch(COUNT_BATCH, torch.Generator().manual_seed(0))
    return (inputs.numel() * inputs.element_size() + targets.numel() * targets.element_size()) / COUNT_BATCH
