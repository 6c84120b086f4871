"""bench/harness/runner.py: one measured run in this process: seeded, repeatable bit for bit, training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from tests.helpers.ranks import run_ranks_sequence


def test_same_seed_gives_bit_identical_losses_and_another_seed_does_not(tmp_path: Path) -> None:
    def losses(seed: int) -> list[float]:
        config = resolve(RunConfig.from_flags(model="cnn", preset="tiny", steps=3, warmup=0, seed=seed,
                                              out=str(tmp_path / "r.jsonl")))
        return global_losses(train(config).ranks)

    first, again = losses(0), losses(0)
    assert first == again  # bit-identical, not merely close
    assert losses(1) != first


@pytest.mark.distributed
def test_deterministic_mode_repeats_bit_for_bit(tmp_path: Path) -> None:
    # ddp on 2 gloo ranks, twice: the same command (rerun in the same processes, which only adds
    # ways for state to leak from the first run into the second) gives the same bits.
    config = resolve(RunConfig.from_flags(strategy="ddp", devices=2, model="cnn", preset="tiny", steps=3, warmup=1,
                                          deterministic=True, out=str(tmp_path / "r.jsonl")))
    first, again = run_ranks_sequence([config, config], 2, tmp_path)
    assert global_losses(first[0].ranks) == global_losses(again[0].ranks)  # bit-identical, not merely close
    assert all(torch.equal(v, again[0].model_state[k]) for k, v in first[0].model_state.items())


def test_a_process_counts_each_workloads_flops_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import models
    from bench.harness import runner
    from models.flops import train_flops_per_sample

    counted: list[str] = []

    def counting(spec: models.ModelSpec) -> int:
        counted.append(spec.name)
        return train_flops_per_sample(spec)

    monkeypatch.setattr(runner, "_FLOPS", {})
    monkeypatch.setattr(runner, "train_flops_per_sample", counting)

    def flops(model: str, norm: str = "batch") -> int | None:
        return train(resolve(RunConfig.from_flags(model=model, preset="tiny", norm=norm, steps=1, warmup=0,
                                                  out=str(tmp_path / "r.jsonl")))).flops_per_sample

    first, again, other = flops("cnn"), flops("cnn"), flops("mlp")
    assert len(counted) == 2 and counted[0] != counted[1]  # the cnn's once, then the mlp's
    assert first == again == train_flops_per_sample(models.build_model("cnn", "tiny", "batch")) != other
    flops("cnn", norm="group")  # another workload of the same family: counted for itself
    assert len(counted) == 3


def test_training_reduces_the_loss_on_a_learnable_batch(tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(model="cnn", preset="tiny", steps=8, warmup=0, lr=0.05,
                                          out=str(tmp_path / "r.jsonl")))
    losses = global_losses(train(config).ranks)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_the_ranks_meet_after_the_last_warm_up_step_before_the_first_timed_one(
        warmup: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last warm-up step's byte counting is read on each rank for its own while; without the barrier a rank
    that left it first waited for its peers inside its first timed step (fsdp ZeRO-3's measured 2x its others)."""
    from bench.harness import runner

    seen: list[str] = []
    step = runner._one_step

    def one_step(*args: object) -> None:
        seen.append(f"step {args[2]}")
        step(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "_one_step", one_step)
    monkeypatch.setattr(runner, "barrier", lambda: seen.append("barrier"))
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", steps=2, warmup=warmup,
                                          out=str(tmp_path / "r.jsonl")))
    result = train(config)
    assert len(result.ranks[0].step_times_s) == 2
    expected = [f"step {s}" for s in range(warmup + 2)]
    if warmup:
        expected.insert(warmup, "barrier")
    assert seen == expected
