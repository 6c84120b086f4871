"""The three model families: every preset builds, splits into stages that compose to the whole, counts FLOPs."""

from __future__ import annotations

import pytest
import torch

import models
from models.data import RandomDataset, global_batches
from models.flops import train_flops_per_sample
from strategies.partition import even_balance, split_sequential

FAMILIES = list(models.FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("preset", models.PRESETS)
def test_every_preset_builds_and_gives_logits_per_sample(family: str, preset: str) -> None:
    # The large presets are GPU-sized: build them on the meta device (shapes only).
    device = torch.device("meta" if preset == "large" else "cpu")
    with device:
        spec = models.build_model(family, preset)
    inputs, targets = spec.make_batch(2, torch.Generator().manual_seed(0))
    logits = spec.blocks(inputs.to(device))
    assert logits.shape[0] == 2 and logits.dim() == 2
    assert int(targets.max()) < logits.shape[1]
    assert len(spec.blocks) >= 4, "too few blocks to split over 4 stages"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_stages_compose_to_the_whole_model(family: str, stages: int) -> None:
    torch.manual_seed(0)
    spec = models.build_model(family, "tiny", norm="group")
    spec.blocks.eval()
    inputs, _ = spec.make_batch(4, torch.Generator().manual_seed(1))
    parts = split_sequential(spec.blocks, even_balance(len(spec.blocks), stages))
    x = inputs
    for part in parts:
        x = part(x)
    torch.testing.assert_close(x, spec.blocks(inputs), rtol=0, atol=0)


def test_cnn_norm_is_selectable() -> None:
    batch = models.build_model("cnn", "tiny", norm="batch").blocks
    group = models.build_model("cnn", "tiny", norm="group").blocks
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in batch.modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in group.modules())
    assert any(isinstance(m, torch.nn.GroupNorm) for m in group.modules())


def test_resnet_presets_are_the_torchvision_networks() -> None:
    from torchvision.models import resnet18, resnet50

    with torch.device("meta"):
        small = models.build_model("cnn", "small").blocks
        large = models.build_model("cnn", "large").blocks
        n18 = sum(p.numel() for p in resnet18(num_classes=10).parameters())
        n50 = sum(p.numel() for p in resnet50().parameters())
    assert sum(p.numel() for p in small.parameters()) == n18
    assert sum(p.numel() for p in large.parameters()) == n50
    assert len(large) == 1 + 16 + 1  # stem, 16 bottlenecks, head


def test_flops_per_sample_match_the_arithmetic_of_an_mlp() -> None:
    spec = models.build_model("mlp", "tiny")
    width, depth, classes = 32, 4, 10
    forward = 2 * (depth * width * width + width * classes)
    # Backward costs twice the forward, but the first layer needs no input gradient.
    backward = 2 * forward - 2 * width * width
    assert train_flops_per_sample(spec) == forward + backward


def test_flops_of_resnet50_are_about_three_times_its_forward() -> None:
    with torch.device("meta"):
        spec = models.build_model("cnn", "large")
    # ResNet-50 forward at 224 px is 4.1 GMACs = 8.2 GFLOPs; training is about 3x that.
    assert 23e9 < train_flops_per_sample(spec) < 26e9


def test_random_dataset_is_seeded_and_batches_wrap() -> None:
    spec = models.build_model("mlp", "tiny")
    a, b = RandomDataset(spec, 12, seed=3), RandomDataset(spec, 12, seed=3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, RandomDataset(spec, 12, seed=4).inputs)
    batches = list(global_batches(a, batch_size=8, steps=3))
    assert [len(t) for _, t in batches] == [8, 8, 8]
    torch.testing.assert_close(batches[1][0][4:], a.inputs[:4])  # step 1 covers samples 8..11, 0..3


def test_bring_your_own_model(tmp_path, monkeypatch) -> None:
    (tmp_path / "mymodel.py").write_text(
        "import torch\nfrom torch import nn\nfrom models import ModelSpec\n"
        "def build(preset='small'):\n"
        "    width = 6 if preset == 'tiny' else 12\n"
        "    blocks = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 3))\n"
        "    def make_batch(n, g):\n"
        "        return torch.randn(n, width, generator=g), torch.randint(3, (n,), generator=g)\n"
        "    return ModelSpec('mine', blocks, make_batch, nn.CrossEntropyLoss(), default_batch_size=4)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = models.build_model("mymodel:build", preset="tiny")
    assert spec.blocks[0].in_features == 6 and spec.default_batch_size == 4
    with pytest.raises(models.ModelImportError, match="has no function 'nope'"):
        models.build_model("mymodel:nope")
    with pytest.raises(models.ModelImportError, match="cannot import 'no_such_module_xyz'"):
        models.build_model("no_such_module_xyz:build")
