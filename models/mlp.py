"""``mlp``: a stack of Linear + ReLU blocks and a Linear classifier."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.spec import COLWISE, ROWWISE, ModelSpec, TensorParallelPlan


@dataclass(frozen=True)
class MLPPreset:
    width: int
    """Input features and hidden width."""
    depth: int
    """Number of Linear + ReLU blocks before the classifier."""
    classes: int
    """Output classes."""
    batch_size: int
    """Default global batch."""


PRESETS = {
    "tiny": MLPPreset(width=32, depth=4, classes=10, batch_size=8),
    "small": MLPPreset(width=1024, depth=8, classes=10, batch_size=64),
    "large": MLPPreset(width=8192, depth=12, classes=1000, batch_size=1024),
}


def tp_plan(depth: int, width: int) -> TensorParallelPlan:
    """Consecutive hidden blocks in Megatron-LM pairs: block 2j's Linear by columns, block 2j+1's by rows,
    one all-reduce per pair (the ReLU between them acts on each rank's columns alone). With an odd depth
    the last hidden block has no partner and stays replicated, as does the classifier."""
    styles: dict[str, str] = {}
    for j in range(depth // 2):
        styles |= {f"{2 * j}.0": COLWISE, f"{2 * j + 1}.0": ROWWISE}
    return TensorParallelPlan(styles, {"hidden width": width})


def build(preset: str, norm: str = "batch") -> ModelSpec:
    """Builds the MLP; ``norm`` is accepted for a uniform signature and ignored (there is none)."""
    p = PRESETS[preset]
    blocks: list[nn.Module] = [nn.Sequential(nn.Linear(p.width, p.width), nn.ReLU()) for _ in range(p.depth)]
    blocks.append(nn.Linear(p.width, p.classes))

    def make_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.randn(n, p.width, generator=generator)
        targets = torch.randint(p.classes, (n,), generator=generator)
        return inputs, targets

    return ModelSpec("mlp", nn.Sequential(*blocks), make_batch, nn.CrossEntropyLoss(), p.batch_size,
                     tp_plan(p.depth, p.width))
