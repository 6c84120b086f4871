"""Checkpoints are strategy-free: written under any strategy, loaded under any other, refused when foreign."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.harness.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from bench.harness.config import RunConfig, resolve, unread_groups_reset
from bench.harness.runner import global_losses, train
from tests.helpers.cli import run_in_process
from tests.helpers.equivalence import ATOL, RTOL
from tests.helpers.ranks import run_ranks_sequence

BASE = RunConfig.from_flags(model="mlp", preset="tiny", norm="group", batch_size=8, steps=2, warmup=0)


def test_round_trip_and_the_clear_errors(tmp_path: Path) -> None:
    state = {"0.0.weight": torch.randn(3, 3), "1.bias": torch.randn(3)}
    path = tmp_path / "a.pt"
    save_checkpoint(path, state, model="mlp", preset="tiny", strategy="pp")
    loaded = load_checkpoint(path, model="mlp", preset="tiny")
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())
    assert not path.with_name("a.pt.partial").exists()

    with pytest.raises(CheckpointError, match="is for model 'mlp', not 'cnn'"):
        load_checkpoint(path, model="cnn")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="cannot be read .*truncated or foreign"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a checkpoint written by this suite"):
        load_checkpoint(foreign)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_bad_checkpoint_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip")
    results = tmp_path / "r.jsonl"
    code, err = run_in_process(capsys, "run", "--preset", "tiny", "--model", "mlp", "--load-checkpoint", str(bad),
                               "--out", str(results))
    assert code == 2 and err.count("\n") == 1 and "truncated or foreign" in err
    assert not results.exists()


def _saved(config: RunConfig, path: Path) -> RunConfig:
    """``config`` saving to ``path``, with only the options its strategy reads (mp and pp take BASE's micro-batches)."""
    saving = config.with_flags(save_checkpoint=str(path), out=str(path.with_suffix(".jsonl")))
    return resolve(unread_groups_reset(saving))


@pytest.mark.distributed
def test_saved_under_one_strategy_loaded_under_every_other(tmp_path: Path) -> None:
    # A: two steps under single. Then each strategy continues from A for two steps and saves again;
    # every continuation must equal single's continuation, and differ from a fresh start.
    start = tmp_path / "start.pt"
    train(_saved(BASE, start))
    resumed = BASE.with_flags(load_checkpoint=str(start))
    resumed = resumed.with_flags(microbatches=4)  # for mp and pp; _saved drops it for the others
    in_process = {name: _saved(resumed.with_flags(strategy=name, devices=n), tmp_path / f"{name}.pt")
                  for name, n in (("single", 1), ("mp", 2), ("dp", 2))}
    losses = {name: global_losses(train(config).ranks) for name, config in in_process.items()}
    per_device = {name: _saved(resumed.with_flags(strategy=name, devices=2), tmp_path / f"{name}.pt")
                  for name in ("ddp", "pp", "zero1", "fsdp", "tp")}
    for name, results in zip(per_device, run_ranks_sequence(list(per_device.values()), 2, tmp_path), strict=True):
        losses[name] = global_losses(results[0].ranks)

    want = load_checkpoint(tmp_path / "single.pt")
    for name in ("mp", "dp", "ddp", "pp", "zero1", "fsdp", "tp"):
        got = load_checkpoint(tmp_path / f"{name}.pt", model="mlp", preset="tiny")
        assert list(got) == list(want), name  # same keys, same order: no "module." prefix, stages merged
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, rtol=RTOL, atol=ATOL, msg=f"{name} {key}")
        torch.testing.assert_close(torch.tensor(losses[name]), torch.tensor(losses["single"]), rtol=RTOL, atol=ATOL)
    fresh = global_losses(train(resolve(BASE.with_flags(out=str(tmp_path / "f.jsonl")))).ranks)
    assert losses["single"][0] != fresh[0]  # the load really happened
