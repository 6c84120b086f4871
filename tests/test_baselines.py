"""bench/experiments/baselines/: the tutorials' loops, held to the suite's ``single`` and to each other.

Every equivalence test holds a strategy to ``single``, run by the same runner, optimizer set-up and
data; a fault in that shared path would pass them all. This holds ``single`` itself to the textbook
loop (plain_loop.py): same seed, same model, same samples, and the same losses and parameters bit for
bit in fp32. The DDP and FSDP2 tutorials' scripts (plain_ddp.py, plain_fsdp.py), on a process group of
one rank in this process, train exactly as that loop does.
"""

from __future__ import annotations

import datetime
import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import models
from bench.experiments.baselines.plain_ddp import plain_ddp_step_times
from bench.experiments.baselines.plain_fsdp import plain_fsdp_step_times
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


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    """The tutorials' ``setup``: a gloo process group, here of this process alone."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        gc.collect()  # a sharded model's reference cycles hold the group (plain_fsdp.py's own exit does the same)
        dist.destroy_process_group()


def _trained_by(script: Callable[..., list[float]], monkeypatch: pytest.MonkeyPatch,
                **kwargs: object) -> tuple[list[float], torch.nn.Module]:
    """``script``'s step times on the tiny mlp and the model it trained (which it does not return)."""
    built = []
    build = models.build_model

    def recording(*args: object, **kw: object) -> models.ModelSpec:
        built.append(build(*args, **kw))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(models, "build_model", recording)
    times = script("mlp", "tiny", BATCH, STEPS, WARMUP, **kwargs)
    (spec,) = built
    return times, spec.blocks


@pytest.mark.usefixtures("one_rank_group")
def test_the_ddp_tutorial_on_one_rank_trains_exactly_like_the_tutorial_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    times, net = _trained_by(plain_ddp_step_times, monkeypatch)
    assert len(times) == STEPS and all(t > 0 for t in times)  # the warm-up step is not timed
    plain = plain_loop("mlp", "tiny", BATCH, STEPS, WARMUP)
    state = net.state_dict()
    assert state.keys() == plain.state.keys()
    for name, value in plain.state.items():
        assert torch.equal(state[name], value), name


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize("reshard_after_forward", [True, False], ids=["ZeRO-3", "ZeRO-2"])
def test_the_fsdp_tutorial_on_one_rank_trains_exactly_like_the_tutorial_loop(
    reshard_after_forward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    times, net = _trained_by(plain_fsdp_step_times, monkeypatch, reshard_after_forward=reshard_after_forward)
    assert len(times) == STEPS and all(t > 0 for t in times)
    plain = plain_loop("mlp", "tiny", BATCH, STEPS, WARMUP)
    state = {k: v.full_tensor() for k, v in net.state_dict().items()}  # DTensors, sharded over the one rank
    assert state.keys() == plain.state.keys()
    for name, value in plain.state.items():
        assert torch.equal(state[name], value), name
