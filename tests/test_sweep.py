"""bench/experiments/sweep.py: failed and timed-out configurations as rows, resuming without redoing, dry runs
(the plan itself: tests/test_grid.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.experiments.grid import run_key
from bench.harness.records import read_records
from tests.helpers.cli import run_bench


def sweep_args(out: Path, *extra: str) -> list[str]:
    # Beside other tests a run is often disturbed: no second try (tests/helpers/parallel.py).
    return ["sweep", "--repeats", "1", "--strategies", "single", "--devices", "1", "--preset", "tiny", "--steps", "1",
            "--warmup", "1", "--calibration", "none", "--no-rerun-disturbed",
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
    assert bad == [] and rows == [("tests.faulty_models:raising", "failed"), ("mlp", "ok")]
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


# Not `alone`: 20 s above the 3 s timeout for two interpreters' start (it passed in 13-15 s beside a busy loop on
# each core).
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


@pytest.mark.parametrize("rerun", [True, False])
def test_a_disturbed_run_is_run_once_more_unless_told_not_to(
        rerun: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from bench.experiments import sweep
    from bench.experiments.grid import PlannedRun, SweepConfig, plan
    from bench.harness.config import RunConfig
    from bench.harness.records import RECORD_VERSION

    base = RunConfig.from_flags(model="mlp", preset="tiny", out=str(tmp_path / "s.jsonl"))
    config = SweepConfig(strategies=("single",), models=("mlp",), devices=(1,), base=base, rerun_disturbed=rerun)
    (run,) = plan(config)
    ran: list[PlannedRun] = []

    def disturbed_run(sweep_config: SweepConfig, planned: PlannedRun, out: Path, predictor: object) -> str:
        ran.append(planned)
        row = {"record_version": RECORD_VERSION, "config": planned.config.as_dict(), "disturbed": True}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return "ok"

    monkeypatch.setattr(sweep, "_run_once", disturbed_run)
    counts = sweep.execute(config, [run])
    assert ran == [run, run] if rerun else ran == [run]
    assert counts["re-run disturbed"] == int(rerun)


@pytest.mark.parametrize("status", ["ok", "failed"])
def test_each_run_s_canary_is_timed_again_once_it_has_ended_and_only_a_measured_run_is_rescored(
        status: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.experiments import sweep
    from bench.experiments.grid import SweepConfig, plan
    from bench.harness.config import RunConfig
    from bench.harness.launch import ChildOutcome
    from bench.predict.for_sweep import SweepPredictor

    base = RunConfig.from_flags(model="mlp", preset="tiny", out=str(tmp_path / "s.jsonl"))
    (run,) = plan(SweepConfig(strategies=("single",), models=("mlp",), devices=(1,), base=base))
    order: list[str] = []

    class Predictor(SweepPredictor):
        def env_for(self, config: RunConfig) -> dict[str, str]:
            order.append("handed")
            return {}

        def after_run(self, config: RunConfig, out: Path, measured: bool) -> bool:
            order.append(f"after, measured={measured}")
            return False

    monkeypatch.setattr(sweep, "run_child", lambda *_: order.append("ran") or ChildOutcome(status, "", 0.1))
    sweep._run_once(SweepConfig(strategies=("single",), models=("mlp",), devices=(1,), base=base), run,
                    tmp_path / "s.jsonl", Predictor())
    assert order == ["handed", "ran", f"after, measured={status == 'ok'}"]
