"""``rnn``: an embedding, stacked one-layer LSTM blocks and a classifier, on synthetic token sequences."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.spec import ModelSpec


@dataclass(frozen=True)
class RNNPreset:
    vocab: int
    """Token vocabulary size."""
    hidden: int
    """Embedding and LSTM hidden size."""
    layers: int
    """LSTM blocks, one layer each."""
    seq_len: int
    """Tokens per sequence."""
    classes: int
    """Output classes (one label per sequence)."""
    batch_size: int
    """Default global batch."""


PRESETS = {
    "tiny": RNNPreset(vocab=100, hidden=32, layers=2, seq_len=16, classes=10, batch_size=8),
    "small": RNNPreset(vocab=10_000, hidden=256, layers=4, seq_len=32, classes=10, batch_size=32),
    "large": RNNPreset(vocab=32_000, hidden=2048, layers=8, seq_len=128, classes=1000, batch_size=64),
}


class LSTMBlock(nn.Module):
    """One LSTM layer that returns only its output sequence, so blocks chain in an nn.Sequential."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return out


class LastStep(nn.Module):
    """Keeps the last time step: the sequence's summary that the classifier reads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1]


def build(preset: str, norm: str = "batch") -> ModelSpec:
    """Builds the LSTM classifier; ``norm`` is accepted for a uniform signature and ignored."""
    p = PRESETS[preset]
    blocks: list[nn.Module] = [nn.Embedding(p.vocab, p.hidden)]
    blocks += [LSTMBlock(p.hidden) for _ in range(p.layers)]
    blocks.append(nn.Sequential(LastStep(), nn.Linear(p.hidden, p.classes)))

    def make_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(p.vocab, (n, p.seq_len), generator=generator)
        labels = torch.randint(p.classes, (n,), generator=generator)
        return tokens, labels

    return ModelSpec("rnn", nn.Sequential(*blocks), make_batch, nn.CrossEntropyLoss(), p.batch_size)
