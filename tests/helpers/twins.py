"""A data-parallel strategy of two replicas in one process, right or deliberately broken, for the checks
that must tell the two apart (``bench verify``'s verdicts).

    replica 0   first half of the batch  -> grads g0 -.
                                                       +-> (g0 + g1) / 2 on both -> step (lr0, lr1)
    replica 1   second half of the batch -> grads g1 -'

Right, this is ddp with its all-reduce written out: the mean of two half-batch mean gradients is the
batch's mean gradient. Each broken variant is one real data-parallel bug: a wrong learning rate on
rank 1, or a skipped gradient reduction. Its checkpoint is replica 1's, as ``bench run`` keeps the
last rank's copy of replicated parameters (bench/harness/runner.py: _save_merged).
"""

from __future__ import annotations

import copy
from typing import ClassVar

import pytest
import torch
from torch import nn

from models.spec import ModelSpec
from strategies import STRATEGIES, Strategy, Topology
from strategies.base import OptimizerChoice
from strategies.options import ModelFacts


class Twins(nn.Module):
    """The two replicas the step trains; nothing calls it as a module."""

    def __init__(self, blocks: nn.Module) -> None:
        super().__init__()
        self.replicas = nn.ModuleList([blocks, copy.deepcopy(blocks)])


class TwinReplicas(Strategy):
    """Two replicas, their gradients averaged: equal to ``single`` within fp32 rounding."""

    name = "twins"
    description = "test-only: two data-parallel replicas in one process"
    min_devices = 2
    rank1_lr_factor: ClassVar[float] = 1.0
    """Rank 1's learning rate over the one asked for (1: right)."""
    reduces: ClassVar[bool] = True
    """Whether gradients are averaged over the replicas before the step (True: right)."""

    def validate(self, facts: ModelFacts) -> None:
        pass  # two replicas whatever --devices says: verify checks it at 2

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return Twins(spec.blocks)

    def make_optimizer(self, model: nn.Module, choice: OptimizerChoice) -> torch.optim.Optimizer:
        first, second = model.replicas
        lr = choice.kwargs["lr"]
        return choice.cls([{"params": first.parameters()},
                           {"params": second.parameters(), "lr": lr * self.rank1_lr_factor}], **choice.kwargs)

    def train_step(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: nn.Module,
                   optimizer: torch.optim.Optimizer) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for replica, x, y in zip(model.replicas, inputs.chunk(2), targets.chunk(2), strict=True):
            loss = loss_fn(replica(x), y)
            loss.backward()
            losses.append(loss.detach())
        if self.reduces:
            for a, b in zip(model.replicas[0].parameters(), model.replicas[1].parameters(), strict=True):
                mean = (a.grad + b.grad) / 2
                a.grad.copy_(mean)
                b.grad.copy_(mean)
        optimizer.step()
        return torch.stack(losses).mean()

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.replicas[1].state_dict()


class WrongLrOnRank1(TwinReplicas):
    name = "twins-lr-rank1"
    rank1_lr_factor = 2.0


class SkippedReduction(TwinReplicas):
    name = "twins-no-reduce"
    reduces = False


TWINS = (TwinReplicas, WrongLrOnRank1, SkippedReduction)


def register_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registers the twins under their names for this test (the registry is restored after it)."""
    for cls in TWINS:
        monkeypatch.setitem(STRATEGIES, cls.name, cls)
