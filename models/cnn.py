"""``cnn``: a torchvision ResNet flattened into blocks (stem, each residual block, head)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from models.spec import ModelSpec

if TYPE_CHECKING:
    # torchvision is imported where a ResNet is built: importing it takes seconds, and every process
    # the suite starts (each rank of every run) would pay them for any model.
    from torchvision.models.resnet import ResNet


@dataclass(frozen=True)
class CNNPreset:
    block: Literal["basic", "bottleneck"]
    """torchvision's residual block type: BasicBlock or Bottleneck."""
    layers: tuple[int, int, int, int]
    """Residual blocks per ResNet stage: (2, 2, 2, 2) is ResNet-18, Bottleneck (3, 4, 6, 3) ResNet-50."""
    image_size: int
    """Square input side in pixels."""
    classes: int
    """Output classes."""
    batch_size: int
    """Default global batch."""


PRESETS = {
    # A four-block ResNet ("ResNet-10"): the real torchvision blocks, small enough for tests.
    "tiny": CNNPreset("basic", (1, 1, 1, 1), image_size=32, classes=10, batch_size=8),
    "small": CNNPreset("basic", (2, 2, 2, 2), image_size=32, classes=10, batch_size=32),
    "large": CNNPreset("bottleneck", (3, 4, 6, 3), image_size=224, classes=1000, batch_size=128),
}

NORMS = ("batch", "group")


def norm_layer(norm: str) -> Callable[[int], nn.Module]:
    """BatchNorm by default; GroupNorm keeps each sample's statistics its own, so a strategy that
    splits the batch computes exactly what one device computes."""
    if norm == "batch":
        return nn.BatchNorm2d
    if norm == "group":
        return partial(nn.GroupNorm, 32)
    raise ValueError(f"unknown norm {norm!r}; choose from {', '.join(NORMS)}")


def resnet_blocks(resnet: ResNet) -> nn.Sequential:
    """The ResNet's forward, cut at every residual block so a balance list can split it anywhere."""
    stem = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool)
    residual = [block for stage in (resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4) for block in stage]
    head = nn.Sequential(resnet.avgpool, nn.Flatten(1), resnet.fc)
    return nn.Sequential(stem, *residual, head)


def build(preset: str, norm: str = "batch") -> ModelSpec:
    """Builds the ResNet of ``preset`` with the chosen normalisation."""
    from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

    p = PRESETS[preset]
    block = BasicBlock if p.block == "basic" else Bottleneck
    resnet = ResNet(block, list(p.layers), num_classes=p.classes, norm_layer=norm_layer(norm))

    def make_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.randn(n, 3, p.image_size, p.image_size, generator=generator)
        labels = torch.randint(p.classes, (n,), generator=generator)
        return images, labels

    return ModelSpec("cnn", resnet_blocks(resnet), make_batch, nn.CrossEntropyLoss(), p.batch_size)


def build_resnet(block: str, layers: tuple[int, ...], groups: int = 1, width_per_group: int = 64,
                 classes: int = 1000, norm: str = "batch") -> nn.Sequential:
    """Any torchvision ResNet or ResNeXt from its published dimensions (ResNet-50: bottleneck, 3-4-6-3, 1
    group of 64; ResNeXt-50 32x4d: 32 groups of 4), cut into blocks as the presets are. Build it under
    ``torch.device("meta")`` to count without allocating."""
    from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

    if block not in ("basic", "bottleneck") or len(layers) != 4:
        raise ValueError(f"block {block!r} with layers {'-'.join(map(str, layers))}: need basic or bottleneck "
                         "and 4 stages")
    kind = BasicBlock if block == "basic" else Bottleneck
    return resnet_blocks(ResNet(kind, list(layers), num_classes=classes, groups=groups,
                                width_per_group=width_per_group, norm_layer=norm_layer(norm)))
