"""``tp``'s optimizer under the step CUDA picks by default (foreach), on one in-process gloo rank.

tp leaves the layers its plan does not name as plain tensors beside its DTensor slices. On CUDA torch
chooses the foreach step for such a list (DTensor counts among its foreach types), and one foreach
kernel over a list that mixes the two kinds raises. The CPU would choose the per-tensor loop, so the
test tells torch's own choice that the CPU is a foreach device, as CUDA is.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import models
from bench.harness.config import RunConfig
from bench.harness.runner import optimizer_choice
from strategies import build_strategy
from strategies.base import Topology, groups_by_kind
from strategies.fsdp import full_state

CPU = Topology(devices=(torch.device("cpu"),))
# torch.optim's package namespace does not keep the module's name; sys.modules does.
OPTIMIZER_MODULE = importlib.import_module("torch.optim.optimizer")


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    """A one-rank gloo group: tp's mesh is then one device, and its parameters still DTensors."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def cuda_foreach_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's default-step choice as on CUDA: foreach wherever every parameter is a foreach type on a
    foreach device (the CPU joins CUDA in the device list)."""
    monkeypatch.setattr(OPTIMIZER_MODULE, "_get_foreach_kernels_supported_devices", lambda: ["cuda", "cpu"])


def _trained(strategy: str, model: str, optimizer: str) -> dict[str, torch.Tensor]:
    config = RunConfig.from_flags(strategy=strategy, model=model, preset="tiny", optimizer=optimizer, devices=1,
                                  accelerator="cpu", precision="fp32", batch_size=8)
    torch.manual_seed(0)
    spec = models.build_model(model, "tiny", "batch")
    run = build_strategy(strategy, config)
    module = run.prepare(spec, CPU)
    opt = run.make_optimizer(module, optimizer_choice(config))
    inputs, targets = spec.make_batch(8, torch.Generator().manual_seed(1))
    for _ in range(2):
        run.train_step(module, inputs, targets, spec.loss_fn, opt)
    return {k: v.detach().clone() for k, v in full_state(module).items()}


def test_the_cuda_default_really_is_foreach_for_a_list_with_dtensors(one_rank: None, cuda_foreach_default: None
                                                                     ) -> None:
    # The fixture's premise: without it the CPU would take the per-tensor loop and nothing would be tested.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    mixed = [torch.zeros(2), distribute_tensor(torch.zeros(2), mesh, [Replicate()])]
    assert isinstance(mixed[1], DTensor)
    assert OPTIMIZER_MODULE._default_to_fused_or_foreach(mixed, differentiable=False) == (False, True)


@pytest.mark.parametrize(("model", "optimizer"), [("mlp", "sgd"), ("transformer", "adam")])
def test_tp_steps_under_cuda_foreach_and_trains_like_one_device(one_rank: None, cuda_foreach_default: None,
                                                                model: str, optimizer: str) -> None:
    # Before the parameter groups: "aten._foreach_add_.List got mixed torch.Tensor and DTensor" at step 0.
    tp = _trained("tp", model, optimizer)
    single = _trained("single", model, optimizer)
    assert tp.keys() == single.keys()
    for key, value in single.items():
        torch.testing.assert_close(tp[key], value, rtol=1e-5, atol=1e-6, msg=key)


def test_groups_by_kind_keeps_every_parameter_once_and_never_mixes(one_rank: None) -> None:
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    config = RunConfig.from_flags(strategy="tp", model="mlp", preset="tiny", devices=1, accelerator="cpu",
                                  precision="fp32",
                       batch_size=8)
    module = build_strategy("tp", config).prepare(models.build_model("mlp", "tiny", "batch"), CPU)
    groups = groups_by_kind(module.parameters())
    kinds = [{isinstance(p, DTensor) for p in g["params"]} for g in groups]
    assert kinds == [{False}, {True}]
    assert sorted(map(id, (p for g in groups for p in g["params"]))) == sorted(map(id, module.parameters()))
