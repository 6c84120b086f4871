"""Models that fail or stall on purpose, loaded through ``--model tests.faulty_models:NAME`` like any user's model."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from models import ModelSpec, build_model


class Raise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("injected fault in forward")


STALLED_MARKER = "BENCH_TEST_STALLED"
"""A file the stalling model creates as it starts to hang, for a test that must act on a hanging child."""


class Stall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if marker := os.environ.get(STALLED_MARKER):
            Path(marker).touch()
        time.sleep(3600)
        return x


def _with_block(block: nn.Module, preset: str) -> ModelSpec:
    spec = build_model("mlp", preset)
    return ModelSpec("faulty", nn.Sequential(*spec.blocks, block), spec.make_batch, spec.loss_fn, 4)


def raising(preset: str = "tiny") -> ModelSpec:
    """Raises in its first forward."""
    return _with_block(Raise(), preset)


def stalling(preset: str = "tiny") -> ModelSpec:
    """Hangs in its first forward."""
    return _with_block(Stall(), preset)


class OutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("injected: tried to allocate 64.00 GiB")


class HostOutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # 1 PiB: more than any machine's RAM and swap, so malloc fails at once (no OOM killer involved).
        return x + torch.empty(2**50, dtype=torch.uint8).sum()


def host_out_of_memory(preset: str = "tiny") -> ModelSpec:
    """Really runs out of host memory in its first forward: the CPU allocator refuses 1 PiB."""
    return _with_block(HostOutOfMemory(), preset)


def out_of_memory(preset: str = "tiny") -> ModelSpec:
    """Runs out of memory in its first forward (simulated, so it works on any device)."""
    return _with_block(OutOfMemory(), preset)


SLEEP_MS_PER_SAMPLE = 5.0
"""The sleeping model's forward time per sample: a step whose length the tests know in advance."""


class SleepPerSample(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(len(x) * SLEEP_MS_PER_SAMPLE / 1e3)
        return x


def sleeping(preset: str = "tiny") -> ModelSpec:
    """The mlp whose forward sleeps SLEEP_MS_PER_SAMPLE per sample: step time in proportion to the work,
    and far above the noise of a busy machine, so a timing guard can be held to its real target."""
    return _with_block(SleepPerSample(), preset)
