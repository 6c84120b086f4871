"""What every model family hands to a strategy: blocks to split, a way to make data, and a loss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# make_batch(n, generator) -> (inputs, targets) for n samples, on the CPU.
BatchMaker = Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class ModelSpec:
    """A model as the strategies see it.

    Strategies never look inside the blocks: they split ``blocks`` by a balance list
    (``[3, 2, 2]`` blocks per stage) and compose the pieces again, so the model's own
    attribute names never matter.
    """

    name: str
    """Short name recorded with every run (``mlp``, ``cnn``, ``rnn`` or the import path)."""
    blocks: nn.Sequential
    """The whole network as an ordered list of blocks; ``blocks(inputs)`` gives the logits."""
    make_batch: BatchMaker
    """Makes ``n`` synthetic samples and their targets from a seeded generator."""
    loss_fn: nn.Module
    """Mean-reduced loss over a batch, so that equal shards average to the global loss."""
    default_batch_size: int = 32
    """Global batch used when the command line gives none."""

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, nn.Sequential):
            raise TypeError(f"model {self.name!r}: blocks must be an nn.Sequential, got {type(self.blocks).__name__}")
        if len(self.blocks) == 0:
            raise ValueError(f"model {self.name!r} has no blocks")
        if getattr(self.loss_fn, "reduction", "mean") != "mean":
            raise ValueError(f"model {self.name!r}: the loss must use reduction='mean'")
