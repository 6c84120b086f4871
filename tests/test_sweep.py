"""The sweep: its plan, failed and timed-out configurations as rows, and resuming without redoing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.experiments.grid import SweepConfig, plan, run_key
from bench.harness.config import RunConfig
from bench.harness.records import read_records
from tests.helpers.cli import run_bench


def test_weak_scaling_grows_the_global_batch_and_strong_keeps_it(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    for scaling, expected in (("weak", [8, 16]), ("strong", [8, 8])):
        sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling=scaling)
        runs = [r for r in plan(sweep) if r.config.strategy == "ddp"]
        assert [r.config.run.batch_size for r in runs] == expected
        assert {r.config.measure.scaling for r in runs} == {scaling}


def test_plan_skips_what_cannot_run_and_says_why(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=3, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="strong")
    runs = {(r.config.strategy, r.config.run.devices): r for r in plan(sweep)}
    assert ("single", 2) not in runs  # the reference runs on one device only: not a point of the grid
    assert runs[("single", 1)].skip_reason is None
    assert "3 is not divisible by 2" in runs[("ddp", 2)].skip_reason


def test_repeats_run_round_by_round_each_with_its_own_key(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="strong",
                        repeats=3)
    runs = plan(sweep)
    order = [(r.config.measure.repeat, r.config.strategy, r.config.run.devices) for r in runs]
    grid = [("single", 1), ("ddp", 1), ("ddp", 2)]
    assert order == [(repeat, *point) for repeat in range(3) for point in grid]
    assert len({run_key(r.config.as_dict()) for r in runs}) == 9


def test_weak_scaling_plans_single_at_every_global_batch_so_speedups_compare_equal_work(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="weak")
    singles = sorted(r.config.run.batch_size for r in plan(sweep) if r.config.strategy == "single")
    assert singles == [8, 16]


def test_a_strategy_with_no_point_in_the_sweep_gets_a_skipped_row_saying_why(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "hybrid"), models=("mlp",), devices=(1, 2), base=base, repeats=2)
    (hybrid,) = [r for r in plan(sweep) if r.config.strategy == "hybrid"]  # once, not per repeat
    assert hybrid.skip_reason == "hybrid needs at least 4 devices; this sweep's device counts are 1, 2"


def test_a_sweep_without_one_device_still_plans_single_as_every_speed_up_s_baseline(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(2,), base=base)
    runs = [(r.config.strategy, r.config.run.devices, r.skip_reason) for r in plan(sweep)]
    assert runs == [("ddp", 2, None), ("single", 1, None)]


def test_one_sweep_runs_gpipe_1f1b_and_interleaved_1f1b_each_at_its_own_stages_per_rank(tmp_path: Path) -> None:
    def stages(**flags: object) -> dict[str, tuple[int, str | None]]:
        base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"), **flags)
        sweep = SweepConfig(strategies=("pp",), models=("mlp",), devices=(2,), base=base, microbatches=(4,),
                            schedules=("gpipe", "1f1b", "interleaved-1f1b"))
        return {r.config.pipeline.schedule: (r.config.pipeline.stages_per_rank, r.skip_reason) for r in plan(sweep)}

    assert stages() == {"gpipe": (1, None), "1f1b": (1, None), "interleaved-1f1b": (2, None)}
    # stages per rank the user set are kept, for every schedule: gpipe and 1f1b then say why they cannot
    chosen = stages(stages_per_rank=2)
    assert chosen["interleaved-1f1b"] == (2, None)
    assert chosen["gpipe"][0] == 2 and "stage" in chosen["gpipe"][1]


def sweep_args(out: Path, *extra: str) -> list[str]:
    return ["sweep", "--repeats", "1", "--strategies", "single", "--devices", "1", "--preset", "tiny", "--steps", "1",
            "--warmup", "1", "--calibration", "none",
            "--out", str(out), *extra]


@pytest.mark.launches
def test_a_failing_configuration_becomes_a_row_and_the_sweep_goes_on_then_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from bench.cli import main

    out = tmp_path / "sweep.jsonl"
    proc = run_bench(*sweep_args(out, "--models", "tests.faulty_models:raising,mlp"), env={"PYTHONPATH": "."})
    assert proc.returncode == 0, proc.stderr
    assert "1 ok, 1 failed" in proc.stdout
    records, bad = read_records(out)
    rows = [(r["model"], r["status"]) for r in records]
    # On a busy machine the mlp run may be marked disturbed and run once more: a further ok row.
    assert bad == [] and rows[:2] == [("tests.faulty_models:raising", "failed"), ("mlp", "ok")]
    assert all(row == ("mlp", "ok") for row in rows[2:]) and all(r["disturbed"] for r in records[1:-1])
    assert "injected fault in forward" in records[0]["reason"]

    # A killed writer's torn line, then the same sweep again: it is reported, and nothing is redone.
    with out.open("a") as f:
        f.write('{"record_version": 1, "sta')
    before = out.read_text()
    capsys.readouterr()
    assert main(sweep_args(out, "--models", "tests.faulty_models:raising,mlp")) == 0  # starts nothing: here
    again = capsys.readouterr()
    assert "2 already done" in again.out
    assert f"{out}:{len(rows) + 1} skipped: not valid JSON" in caplog.text
    assert out.read_text() == before


@pytest.mark.launches
def test_a_stalled_configuration_times_out_as_a_row(tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    start = time.monotonic()
    proc = run_bench(*sweep_args(out, "--models", "tests.faulty_models:stalling", "--run-timeout-s", "3"),
                     env={"PYTHONPATH": "."})
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    (row,) = read_records(out)[0]
    assert row["status"] == "timeout" and row["reason"] == "no result within 3 s"
    assert elapsed < 3 + 20  # the timeout, the kill's grace, and two interpreter start-ups


def test_dry_run_lists_the_plan_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    out = tmp_path / "sweep.jsonl"
    assert main(["sweep", "--repeats", "1", "--strategies", "single", "--models", "mlp,rnn", "--devices", "1,2",
                 "--preset", "tiny", "--batch-size", "8", "--scaling", "strong", "--out", str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [["single", "mlp", "x1", "b8", "#1", "run"],
                                                ["single", "rnn", "x1", "b8", "#1", "run"]]
    assert not out.exists()


def test_sweep_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    for args, message in (
        (["--strategies", "single,warp"], "unknown strategy 'warp'"),
        (["--devices", "0,2"], "--devices must list numbers of at least 1, got (0, 2)"),
        (["--models", "gpt"], "unknown model 'gpt'"),
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["sweep", "--out", str(tmp_path / "s.jsonl"), *args])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_only_configurations_whose_newest_row_is_disturbed_are_run_again(tmp_path: Path) -> None:
    import json

    from bench.experiments.sweep import _disturbed_keys
    from bench.harness.records import RECORD_VERSION

    out = tmp_path / "s.jsonl"
    rows = [({"strategy": "ddp"}, True), ({"strategy": "ddp"}, False), ({"strategy": "mp"}, True)]
    lines = [json.dumps({"record_version": RECORD_VERSION, "config": c, "disturbed": d}) for c, d in rows]
    out.write_text("\n".join(lines) + "\n")
    assert _disturbed_keys(out) == {run_key({"strategy": "mp"})}
