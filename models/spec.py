"""What every model family hands to a strategy: blocks to split, a way to make data, and a loss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# make_batch(n, generator) -> (inputs, targets) for n samples, on the CPU.
BatchMaker = Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]

COLWISE = "colwise"
ROWWISE = "rowwise"
TP_STYLES = (COLWISE, ROWWISE)


@dataclass(frozen=True)
class TensorParallelPlan:
    """Which Linear layers a tensor-parallel strategy may shard, and how: data only, no process groups.

    A column-wise Linear followed by a row-wise one is Megatron-LM's pair (Shoeybi et al. 2019): each
    rank computes a slice of the hidden features from the whole input, then a partial output from its
    slice; one all-reduce sums the partials. What runs between the two acts on each slice alone (ReLU,
    GELU, attention over whole heads), so it needs no communication.
    """

    styles: dict[str, str]
    """Module path inside ``blocks`` -> "colwise" | "rowwise" (torch.distributed.tensor.parallel styles);
    modules not named stay replicated."""
    sharded_dims: dict[str, int]
    """What a tensor-parallel degree must divide, by name: {"attention heads": 4, "mlp hidden width": 1024}."""

    def check_degree(self, degree: int) -> None:
        """Raises ValueError naming every sharded dimension that ``degree`` ranks cannot split evenly."""
        bad = [f"{name} {size}" for name, size in self.sharded_dims.items() if size % degree]
        if bad:
            raise ValueError(f"tensor-parallel degree {degree} does not divide {', '.join(bad)}")

    def local_styles(self, first: int, count: int) -> dict[str, str]:
        """The styles of a piece holding blocks ``first`` to ``first + count - 1`` (a pipeline stage),
        keyed by the piece's own block indices; a pair cut by the piece's edge is left out (replicated).

        A pair is a run of column-wise layers and the row-wise one after it, in the plan's order: a
        column-wise layer whose partner sat on another stage would send that stage a slice of the
        features instead of the whole."""
        local: dict[str, str] = {}
        pair: list[str] = []
        for path, style in self.styles.items():
            pair.append(path)
            if style != ROWWISE:
                continue
            blocks = [int(p.split(".", 1)[0]) for p in pair]
            if all(first <= b < first + count for b in blocks):
                for p in pair:
                    block, rest = p.split(".", 1)
                    local[f"{int(block) - first}.{rest}"] = self.styles[p]
            pair = []
        return local


@dataclass(frozen=True)
class ModelSpec:
    """A model as the strategies see it.

    Strategies never look inside the blocks: they split ``blocks`` by a balance list
    (``[3, 2, 2]`` blocks per stage) and compose the pieces again, so the model's own
    attribute names never matter.
    """

    name: str
    """Short name recorded with every run (``mlp``, ``cnn``, ``rnn``, ``transformer`` or the import path)."""
    blocks: nn.Sequential
    """The whole network as an ordered list of blocks; ``blocks(inputs)`` gives the logits."""
    make_batch: BatchMaker
    """Makes ``n`` synthetic samples and their targets from a seeded generator."""
    loss_fn: nn.Module
    """Mean-reduced loss over a batch, so that equal shards average to the global loss."""
    default_batch_size: int = 32
    """Global batch used when the command line gives none."""
    tp_plan: TensorParallelPlan | None = None
    """How a tensor-parallel strategy may shard ``blocks``; None where the family has no plan."""

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, nn.Sequential):
            raise TypeError(f"model {self.name!r}: blocks must be an nn.Sequential, got {type(self.blocks).__name__}")
        if len(self.blocks) == 0:
            raise ValueError(f"model {self.name!r} has no blocks")
        if getattr(self.loss_fn, "reduction", "mean") != "mean":
            raise ValueError(f"model {self.name!r}: the loss must use reduction='mean'")
        if self.tp_plan is not None:
            check_plan(self.name, self.blocks, self.tp_plan)


def check_plan(name: str, blocks: nn.Sequential, plan: TensorParallelPlan) -> None:
    """Raises ValueError unless every path of ``plan`` names an nn.Linear of ``blocks`` with a known style:
    a wrong path would otherwise only fail once a strategy tries to shard it, inside a process group."""
    modules = dict(blocks.named_modules())
    for path, style in plan.styles.items():
        if style not in TP_STYLES:
            choices = ", ".join(TP_STYLES)
            raise ValueError(f"model {name!r}: tp_plan style {style!r} for {path!r}; choose from {choices}")
        if not isinstance(modules.get(path), nn.Linear):
            found = type(modules[path]).__name__ if path in modules else "nothing"
            raise ValueError(f"model {name!r}: tp_plan path {path!r} names {found}, not an nn.Linear of the blocks")
