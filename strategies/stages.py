"""Cutting a model into stages, the policy mp, pp and hybrid share: checks, balance, profiling.

The arithmetic (even splits, balancing costs, cutting an nn.Sequential) is in partition.py;
this file decides which costs to balance, and checks a split against the model before any
process starts.
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.devices import synchronize
from strategies.errors import ConfigError
from strategies.partition import balance_by_cost, even_balance, explicit_balance, parameter_counts
from strategies.schedules import check_microbatches


def check_split(balance: str, blocks: int, stages: int, batch_size: int, microbatches: int) -> None:
    """The checks mp and pp share, as one-line ConfigErrors: balance against blocks, micro-batches against batch."""
    try:
        explicit_balance(balance, blocks, stages)
        check_microbatches(batch_size, microbatches)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def profile_block_times(blocks: nn.Sequential, sample: torch.Tensor, device: torch.device) -> list[float]:
    """Seconds of forward + backward of each block on ``sample``, one warm-up pass then one timed.

    Runs on a copy, so BatchNorm's running statistics and the gradients of the real model stay
    untouched and the profiled run still trains exactly like ``single``."""
    blocks = copy.deepcopy(blocks).to(device)
    times = [0.0] * len(blocks)
    for _ in range(2):  # the first pass pays for lazy initialisation; the second is kept
        x = sample.to(device)
        for i, block in enumerate(blocks):
            x = x.detach().requires_grad_(i > 0 and x.is_floating_point())  # as in training: no grad for the data
            synchronize([device])
            start = time.perf_counter()
            y = block(x)
            y.float().sum().backward()
            synchronize([device])
            times[i] = time.perf_counter() - start
            x = y
    return times


def stage_balance(mode: str, spec: ModelSpec, stages: int, micro_batch: int, device: torch.device) -> list[int]:
    """Blocks per stage for ``--balance``: an explicit list, even, by parameter count, or by profiled time."""
    blocks = spec.blocks
    explicit = explicit_balance(mode, len(blocks), stages)
    if explicit is not None:
        return explicit
    if mode == "even":
        return even_balance(len(blocks), stages)
    if mode == "params":
        return balance_by_cost(parameter_counts(blocks), stages)
    sample, _ = spec.make_batch(micro_batch, torch.Generator().manual_seed(0))
    return balance_by_cost(profile_block_times(blocks, sample, device), stages)
