"""``single`` against the tutorial loop written apart from it (bench/experiments/baselines/plain_loop.py).

Every equivalence test holds a strategy to ``single``, run by the same runner, optimizer set-up and
data; a fault in that shared path would pass them all. This holds ``single`` itself to the textbook
loop: same seed, same model, same samples, and the same losses and parameters bit for bit in fp32.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import models
from bench.experiments.baselines.plain_loop import plain_loop
from bench.harness import runner
from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from strategies.base import OptimizerChoice
from strategies.precision import Precision

STEPS, WARMUP, BATCH = 3, 1, 8


def _single(model: str, tmp_path: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    config = resolve(RunConfig.from_flags(strategy="single", model=model, preset="tiny", batch_size=BATCH, steps=STEPS,
                                          warmup=WARMUP, precision="fp32", out=str(tmp_path / "r.jsonl")))
    result = train(config, capture_state=True)
    return global_losses(result.ranks), result.model_state


def _assert_same(losses: list[float], state: dict[str, torch.Tensor], model: str) -> None:
    plain = plain_loop(model, "tiny", BATCH, STEPS, WARMUP)
    assert losses == plain.losses  # exact: the same arithmetic in the same order
    assert state.keys() == plain.state.keys()
    for name, value in plain.state.items():
        assert torch.equal(state[name], value), name


@pytest.mark.parametrize("model", list(models.FAMILIES))
def test_single_trains_exactly_like_the_tutorial_loop(model: str, tmp_path: Path) -> None:
    losses, state = _single(model, tmp_path)
    assert len(losses) == STEPS + WARMUP and losses[0] != losses[-1]
    _assert_same(losses, state, model)


@pytest.mark.parametrize("fault", ["lr", "momentum", "data", "loss scaling"])
def test_a_fault_in_the_runner_shared_by_every_strategy_fails_the_check(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if fault == "data":  # every step sees the first batch again
        batches = runner.global_batches
        monkeypatch.setattr(runner, "global_batches", lambda d, b, n: (next(batches(d, b, 1)) for _ in range(n)))
    elif fault == "loss scaling":  # a scaled loss whose gradients are never unscaled
        monkeypatch.setattr(Precision, "backward", lambda self, loss: (loss * 2).backward())
    else:
        kwargs = {"lr": 0.011, "momentum": 0.9} if fault == "lr" else {"lr": 0.01, "momentum": 0.8}
        monkeypatch.setattr(runner, "optimizer_choice", lambda config: OptimizerChoice(torch.optim.SGD, kwargs))
    losses, state = _single("mlp", tmp_path)
    with pytest.raises(AssertionError):
        _assert_same(losses, state, "mlp")
