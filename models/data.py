"""Synthetic, seeded, in-memory data: the PyTorch tutorials' ``RandomDataset`` for every model family."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset

from models.spec import ModelSpec


class RandomDataset(Dataset):
    """``length`` samples made once by the model's ``make_batch`` from ``seed``.

    Every process that builds it with the same seed holds the same samples, so each rank can
    cut its own shard out of the same global batch and the single-device reference sees
    exactly the data the strategies see. Nothing is downloaded.
    """

    def __init__(self, spec: ModelSpec, length: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs, self.targets = spec.make_batch(length, generator)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def global_batches(dataset: RandomDataset, batch_size: int, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yields ``steps`` consecutive global batches, wrapping around the dataset.

    Slicing the stored tensors instead of going through a DataLoader keeps the input
    pipeline out of the measurement: the suite compares parallelism strategies, not loaders.
    """
    n = len(dataset)
    for step in range(steps):
        start = (step * batch_size) % n
        index = torch.arange(start, start + batch_size) % n
        yield dataset.inputs[index], dataset.targets[index]
