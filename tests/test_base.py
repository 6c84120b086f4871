"""strategies/base.py: the Strategy interface's defaults, the topology, and the optimizer's parameter groups."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import OptimizerChoice, Strategy, Topology, groups_by_kind
from strategies.errors import ConfigError
from strategies.options import ModelFacts, RunOptions


class Plain(Strategy):
    """A strategy that overrides only what it must: every other method is the interface's default."""

    name = "plain"

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return spec.blocks.to(topo.devices[0])


def test_the_topology_counts_the_devices_of_every_process() -> None:
    cpu = torch.device("cpu")
    alone = Topology(devices=(cpu,))
    assert (alone.rank, alone.world_size, alone.device_count, alone.is_distributed) == (0, 1, 1, False)
    ranks = Topology(devices=(cpu, cpu), rank=3, world_size=4, local_rank=1)
    assert (ranks.device_count, ranks.is_distributed) == (8, True)


def test_plain_parameters_make_one_group_and_the_optimizer_gets_the_choices_settings() -> None:
    params = [nn.Parameter(torch.ones(2)), nn.Parameter(torch.zeros(3))]
    (group,) = groups_by_kind(params)
    assert [id(p) for p in group["params"]] == [id(p) for p in params]
    assert groups_by_kind([]) == []  # no empty group
    optimizer = OptimizerChoice(torch.optim.SGD, {"lr": 0.5, "momentum": 0.9}).build(params)
    assert len(optimizer.param_groups) == 1
    assert (optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["momentum"]) == (0.5, 0.9)


def test_the_default_validate_admits_exactly_one_device() -> None:
    facts = ModelFacts(blocks=4, gpus=0)
    Plain(RunOptions(devices=1, batch_size=8, accelerator="cpu")).validate(facts)
    with pytest.raises(ConfigError) as refused:
        Plain(RunOptions(devices=2, batch_size=8, accelerator="cpu")).validate(facts)
    assert str(refused.value) == "strategy 'plain' runs on exactly 1 device, got --devices 2"


def test_the_default_step_is_the_textbook_step_on_one_device() -> None:
    strategy = Plain(RunOptions(devices=1, batch_size=4, accelerator="cpu", precision="fp32"))
    topo = strategy.local_topology()
    assert topo == Topology(devices=(torch.device("cpu"),), emulated=False)
    torch.manual_seed(0)
    model, inputs, targets = nn.Linear(3, 2), torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    twin = copy.deepcopy(model)
    inputs, targets = strategy.shard_batch(inputs, targets, topo)  # the whole batch, on the one device
    assert inputs.shape == (4, 3) and targets.tolist() == [0, 1, 1, 0]
    choice = OptimizerChoice(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    loss = strategy.train_step(model, inputs, targets, nn.CrossEntropyLoss(), strategy.make_optimizer(model, choice))
    # The same step written out: zero_grad, forward, loss, backward, step.
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    optimizer.zero_grad()
    expected = nn.CrossEntropyLoss()(twin(inputs), targets)
    expected.backward()
    optimizer.step()
    assert loss is not None and not loss.requires_grad and loss.item() == expected.item()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(), strict=True))
    assert list(strategy.model_state(model)) == ["weight", "bias"]
    assert strategy.rank_fields(model, topo) is None and strategy.record_fields(model, [None]) == {}
