"""``bench verify`` end to end on the tiny mlp: a right strategy passes, broken ones fail with their numbers.

Verify runs every configuration as a ``bench run`` child. Here each "child" runs in this process
instead (``_run_here``: the same ``train`` and the same record), which lets the test register the
strategies it needs (tests/helpers/twins.py) and costs a fraction of a second per run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.experiments import verify
from bench.experiments.grid import run_key
from bench.harness.checkpoint import save_checkpoint
from bench.harness.config import RunConfig, resolve
from bench.harness.launch import ChildOutcome
from bench.harness.records import append_record, build_record, read_records
from bench.harness.runner import train
from tests.helpers.cli import run_bench
from tests.helpers.twins import register_twins

ENV = {"hostname": "testhost"}


def _run_here(config: RunConfig, timeout_s: float, *args: object, **kwargs: object) -> ChildOutcome:
    """What a ``bench run`` child does for an in-process strategy, done in this process."""
    append_record(config.measure.out, build_record(config, train(config), ENV))
    return ChildOutcome("ok", "", 0.0)


@pytest.fixture
def twins(monkeypatch: pytest.MonkeyPatch) -> None:
    register_twins(monkeypatch)
    monkeypatch.setattr(verify, "run_child", _run_here)
    monkeypatch.setattr(verify, "tqdm", _Quiet)


class _Quiet:
    """tqdm's surface that verify uses, printing nothing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def update(self, *args: object) -> None:
        pass

    set_postfix_str = update
    close = update


def test_verify_passes_a_right_strategy_and_fails_a_wrong_lr_or_a_skipped_reduction_with_the_numbers(
    twins: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(strategies=("twins", "twins-lr-rank1", "twins-no-reduce"), models=("mlp",),
                              devices=2, steps=2, run_timeout_s=60.0, out=str(tmp_path / "verify.jsonl"))
    assert verify.main(args) == 1  # one failed row fails the command
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    rows = {row["strategy"]: row for row in _rows(tmp_path / "verify.jsonl")}
    right = rows["twins"]
    assert right["passed"] is True and "reason" not in right
    assert right["max_param_diff"] < 1e-5 and right["max_loss_diff"] < 1e-5
    assert right["devices"] == 2 and lines["twins"].endswith("pass")
    for broken in ("twins-lr-rank1", "twins-no-reduce"):
        row = rows[broken]
        # 2 steps of SGD at lr 0.01: the wrong update moves parameters by ~1e-3, far past fp32's 1e-5.
        assert row["passed"] is False and row["max_param_diff"] > 1e-4, row
        assert f"{row['max_param_diff']:.2e}" in lines[broken] and lines[broken].endswith("FAIL"), lines[broken]
    # Rank 1's own loss only moves after its first wrong step; with 2 steps the second loss shows it.
    assert rows["twins-lr-rank1"]["max_loss_diff"] > 1e-5


def test_a_planned_candidate_is_verified_at_its_own_batch_and_a_broken_one_fails(twins: None, tmp_path: Path) -> None:
    # bench plan --measure: the verdict on each measured candidate's class of run (small preset, batch 48)
    def planned(strategy: str) -> RunConfig:
        return RunConfig.from_flags(strategy=strategy, model="mlp", preset="small", devices=2, batch_size=48, steps=6,
                                    out=str(tmp_path / "measured.jsonl"))

    right, broken = (verify.verify_run(planned(s), steps=2, timeout_s=60) for s in ("twins", "twins-lr-rank1"))
    assert right["passed"] is True and right["max_param_diff"] < 1e-5, right
    assert broken["passed"] is False and broken["max_param_diff"] > 1e-4, broken


def _rows(path: Path) -> list[dict]:
    return read_records(path)[0]


def test_compare_fails_equal_parameters_when_the_losses_differ(tmp_path: Path) -> None:
    # Same checkpoint, different losses: compare must read each run's own record, not the reference's twice.
    want = resolve(RunConfig.from_flags(strategy="single", model="mlp", preset="tiny", steps=2, warmup=0,
                                        out=str(tmp_path / "runs.jsonl"), save_checkpoint=str(tmp_path / "want.pt")))
    got = verify.candidate(want, "mp", 2, tmp_path)
    state = train(want, capture_state=True).model_state
    for config in (want, got):
        save_checkpoint(config.checkpoint.save_checkpoint, state, "mlp", "tiny", config.strategy)
    records = {run_key(want.as_dict()): {"losses": [1.0, 0.5]}, run_key(got.as_dict()): {"losses": [1.0, 0.75]}}
    param_diff, loss_diff, passed = verify.compare(got, want, records)
    assert (param_diff, passed) == (0.0, False)
    assert loss_diff == pytest.approx(0.25)



@pytest.mark.launches
def test_bench_verify_runs_its_children_for_real_and_passes_mp(tmp_path: Path) -> None:
    # The one run through real `bench run` children (the reference, then mp): what the in-process runs above
    # stand in for, a command line that carries the checkpoint and the record to where compare reads them.
    out = tmp_path / "verify.jsonl"
    proc = run_bench("verify", "--strategies", "mp", "--models", "mlp", "--steps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = _rows(out)
    assert (row["strategy"], row["devices"], row["passed"]) == ("mp", 2, True)
    assert 0 <= row["max_param_diff"] < 1e-5 and 0 <= row["max_loss_diff"] < 1e-5
    assert f"{row['max_param_diff']:.2e}" in proc.stdout and proc.stdout.rstrip().endswith("pass")


def test_each_row_is_written_as_it_ends_so_an_interrupted_verify_keeps_what_it_finished(
    twins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_check = verify.check

    def interrupt_the_second(*args: object, **kwargs: object) -> dict[str, object]:
        if args[1] == "twins-no-reduce":
            raise KeyboardInterrupt
        return real_check(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "check", interrupt_the_second)
    args = argparse.Namespace(strategies=("twins", "twins-no-reduce"), models=("mlp",), devices=2, steps=2,
                              run_timeout_s=60.0, out=str(tmp_path / "verify.jsonl"))
    with pytest.raises(KeyboardInterrupt):
        verify.main(args)
    assert [row["strategy"] for row in _rows(tmp_path / "verify.jsonl")] == ["twins"]
