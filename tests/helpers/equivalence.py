"""The single-device reference and the comparison every strategy must pass."""

from __future__ import annotations

import torch

import models
from bench.harness.config import ATOL, RTOL, RunConfig, resolve, unread_groups_reset
from bench.harness.runner import global_losses, train

__all__ = ["ATOL", "RTOL", "assert_matches_reference", "initial_state", "reference", "update_error"]


def reference(config: RunConfig) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses and final parameters of ``config`` trained by the ``single`` strategy."""
    single = resolve(unread_groups_reset(config.with_flags(strategy="single", devices=1)))
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


def initial_state(config: RunConfig) -> dict[str, torch.Tensor]:
    """The weights every strategy starts ``config`` from (the seed's, as the runner builds them)."""
    torch.manual_seed(config.workload.seed)
    blocks = models.build_model(config.workload.model, config.workload.preset, config.workload.norm).blocks
    return {k: v.detach().clone() for k, v in blocks.state_dict().items()}


def update_error(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
                 initial: dict[str, torch.Tensor]) -> float:
    """How far a run's parameter update (final - initial) is from the reference's, relative to the
    reference's: ||u - u_ref|| / ||u_ref|| over every floating-point parameter.

    Losses alone cannot catch a wrong update: a run with lr ~ 0 or doubled gradients stays within a
    few percent of the reference's losses over a few steps, but its update is off by about 100%."""
    keys = [k for k, v in reference.items() if v.is_floating_point()]
    diff = sum(((state[k] - initial[k]) - (reference[k] - initial[k])).double().pow(2).sum() for k in keys)
    size = sum((reference[k] - initial[k]).double().pow(2).sum() for k in keys)
    return float((diff / size).sqrt())
