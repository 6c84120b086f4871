"""Training a tiny model in this process with a knob set, for the knobs' and the precisions' tests."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train

BF16_RTOL = 5e-2
"""Stated tolerance of a bf16 run's losses, step by step, against the same run's in fp32 or single's in bf16
(relative; bf16 keeps 8 mantissa bits)."""

LOSSY_CNN = {"batch_size": 4, "steps": 2, "warmup": 0}
"""The tiny cnn under bf16 or fp16: this CPU has no fast path for either, so torch's reference convolution
runs them, 8x the fp32 step (3.4 s for the 4 steps of 8 samples). Half the samples and half the steps."""


def trained(config: RunConfig) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Every step's loss and the trained parameters of ``config`` run here, in this process."""
    result = train(resolve(config), capture_state=True)
    return global_losses(result.ranks), result.model_state


def base(tmp_path: Path, **fields: object) -> RunConfig:
    """The tiny preset for 3 steps after 1 warm-up, writing into ``tmp_path``, with ``fields`` changed."""
    return RunConfig.from_flags(**{"preset": "tiny", "steps": 3, "warmup": 1, "out": str(tmp_path / "r.jsonl"),
                                   **fields})


def assert_losses_close(losses: list[float], expected: list[float], rtol: float) -> None:
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=rtol, atol=0.0)
