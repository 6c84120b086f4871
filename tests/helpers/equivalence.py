"""The single-device reference and the comparison every strategy must pass."""

from __future__ import annotations

import dataclasses

import torch

from bench.config import ATOL, RTOL, RunConfig, resolve, unread_groups_reset
from bench.runner import global_losses, train

__all__ = ["ATOL", "RTOL", "assert_matches_reference", "reference"]


def reference(config: RunConfig) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses and final parameters of ``config`` trained by the ``single`` strategy."""
    single = resolve(unread_groups_reset(dataclasses.replace(config, strategy="single", devices=1)))
    result = train(single, capture_state=True)
    return global_losses(result.ranks), result.model_state


def assert_matches_reference(
    losses: list[float], state: dict[str, torch.Tensor], expected: tuple[list[float], dict[str, torch.Tensor]]
) -> float:
    """Asserts equal losses and parameters within fp32 tolerance; returns the largest parameter difference."""
    expected_losses, expected_state = expected
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected_losses), rtol=RTOL, atol=ATOL)
    assert state.keys() == expected_state.keys(), sorted(set(state) ^ set(expected_state))
    worst = 0.0
    for name, value in expected_state.items():
        torch.testing.assert_close(state[name], value, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")
        if value.is_floating_point():
            worst = max(worst, (state[name] - value).abs().max().item())
    return worst
