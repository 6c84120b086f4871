"""bench/predict/calibrate.py: the batches a calibration times, what it refuses, and one calibrate -> predict ->
sweep trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.harness.records import read_records
from bench.predict.calibration import Calibration
from strategies.cost_model import threads_per_process
from strategies.model_parallel import threads_term
from tests.helpers.cli import run_bench, run_in_process


@pytest.mark.alone
@pytest.mark.distributed
def test_calibrate_then_predict_then_a_sweep_that_records_each_prediction_and_its_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.predict import calibrate

    # The shared cores' slowdown over 0.5 s windows, not 2 s: its 3 pairs were 12 s of this test's 32.
    measure_slowdown = calibrate.slowdown
    monkeypatch.setattr(calibrate, "slowdown", lambda *args, **kwargs: measure_slowdown(*args, **{**kwargs,
                                                                                                 "seconds": 0.5}))
    calibration = tmp_path / "cal.json"
    # calibrate and predict here (their processes start from the fork server), the sweep in a process of its own.
    assert main(["calibrate", "--model", "mlp", "--preset", "tiny", "--devices", "1,2", "--microbatches", "1",
                 "--collective-max-mib", "1", "--repeats", "2", "--groups", "1", "--out", str(calibration)]) == 0
    # mp's residual, one process's whatever its stage count, fitted over every count's reference runs too; on a CPU
    # also at a rank's share of the cores (bench fidelity's mp as one pp rank), where that is not every core
    calibrated = Calibration.load(calibration)
    assert set(calibrated.across_ranks) == {"mp_per_microbatch", threads_term("mp_per_microbatch",
                                                                             threads_per_process(2))}
    # each rank count's reference runs timed between canaries of its layouts: one process of 2 threads on 1 rank,
    # and on 2 ranks a rank's thread beside mp's 2 (a quiet machine: near the calibration's own canaries)
    assert {d: sorted(by) for d, by in calibrated.reference_drift.items()} == {1: [2], 2: [1, 2]}
    assert all(0.5 < drift < 2.0 for by in calibrated.reference_drift.values() for drift in by.values())
    predictions = tmp_path / "predictions.jsonl"
    assert main(["predict", "--calibration", str(calibration), "--model", "mlp", "--preset", "tiny",
                 "--strategies", "single,ddp,fsdp", "--devices", "1,2", "--out", str(predictions)]) == 0
    records, _ = read_records(predictions)
    # single runs on one device only: that point is left out, with a warning.
    assert [(r["strategy"], r["device_count"]) for r in records] == [("single", 1), ("ddp", 1), ("ddp", 2),
                                                                      ("fsdp", 1), ("fsdp", 2)]
    assert all(r["kind"] == "prediction" and r["predicted_step_time_ms"] > 0 for r in records)
    out = tmp_path / "sweep.jsonl"
    # One child of each kind: a process of its own (mp) and torchrun's workers (ddp).
    proc = run_bench("sweep", "--calibration", str(calibration), "--strategies", "mp,ddp", "--models", "mlp",
                     "--preset", "tiny", "--devices", "2", "--microbatches", "1", "--repeats", "1", "--steps", "2",
                     "--warmup", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [r for r in read_records(out)[0] if r["status"] == "ok"]
    assert {r["strategy"] for r in runs} == {"mp", "ddp"}
    assert all(r["prediction"]["predicted_step_time_ms"] > 0 for r in runs)
    for r in runs:
        assert r["prediction_error"] == pytest.approx(
            r["prediction"]["predicted_step_time_ms"] / r["step_time_ms_median"] - 1)


def test_calibrate_refuses_an_output_it_cannot_write_before_measuring_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_in_process(capsys, "calibrate", "--model", "mlp", "--preset", "tiny", "--out", str(tmp_path))
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1
    code, err = run_in_process(capsys, "calibrate", "--model", "mlp", "--preset", "tiny", "--groups", "0",
                               "--out", str(tmp_path / "cal.json"))
    assert code == 2 and "--groups must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cal.json").exists()


def test_calibration_times_every_batch_share_a_sweep_runs_not_only_the_micro_batches() -> None:
    from bench.predict.calibrate import calibration_batches

    # ddp on 2 and 4 devices runs 32 and 16 samples per process even where the sweep asks for 4 micro-batches.
    assert calibration_batches(64, (2, 4), (4,)) == [4, 8, 16, 32, 64]
    assert calibration_batches(8, (4,), (1,)) == [2, 8]


def test_bench_calibrate_on_a_machine_never_quiet_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from bench.commands import predict as cli

    def never_quiet(*args: object, **kwargs: object) -> None:
        raise cli.Disturbed("2 process(es) computing together were disturbed in all 3 tries (...)")

    monkeypatch.setattr(cli, "calibrate", never_quiet)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--model", "mlp", "--preset", "tiny", "--out", str(tmp_path / "cal.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "disturbed in all 3 tries" in err[0]
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.launches  # the canaries run in forked processes
def test_a_layout_where_the_model_cannot_train_gets_no_canary_and_the_calibration_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """The target sweep's cnn (batch 32 at 4 devices x 8 micro-batches: 1 sample a pass) lost its whole calibration
    to BatchNorm, which cannot train on one value per channel."""
    import functools

    import torch

    import models
    from bench.harness.config import RunConfig, resolve
    from bench.predict.calibrate import _canaries

    config = resolve(RunConfig.from_flags(model="cnn", preset="tiny", batch_size=8))
    make_spec = functools.partial(models.build_model, "cnn", "tiny", config.workload.norm)
    canaries = _canaries(config, make_spec, (2, 4), (1, 2), torch.device("cpu"))  # 8 / (4 x 2): 1 sample
    assert {c.batch for c in canaries} == {2, 4, 8} and all(c.ms > 0 for c in canaries)
    assert "no canary at batch 1, where the model cannot train" in caplog.text


@pytest.mark.launches  # the canaries run in forked processes
def test_a_sweeps_hybrid_mesh_calibrates_its_model_without_its_strategys_options() -> None:
    """`bench sweep --strategies hybrid --dp-shard 2 --tp 2` calibrated the mlp for 107 s, then dropped the file
    ("--dp-shard 2 is for hybrid, not single": single's plain steps were resolved with hybrid's degrees)."""
    from bench.harness.config import RunConfig, resolve
    from bench.predict.calibrate import calibrate

    config = resolve(RunConfig.from_flags(strategy="hybrid", model="mlp", preset="tiny", devices=4, dp_shard=2, tp=2,
                                          microbatches=1, batch_size=8))
    calibration = calibrate(config, devices=(1,), microbatches=(1,), largest=1024, repeats=1)
    assert (calibration.model, calibration.preset) == ("mlp", "tiny")
    # single's plain steps and ddp's one-process reference runs, at their own options
    assert calibration.fitted_runs and all('"strategy": "single"' in key or '"strategy": "ddp"' in key
                                           for key in calibration.fitted_runs)
    assert all('"dp_shard": null' in key and '"tp": null' in key for key in calibration.fitted_runs)


def test_the_compute_is_measured_again_while_its_plain_step_strays_from_its_canary(
        caplog: pytest.LogCaptureFixture) -> None:
    from bench.predict.calibrate import steady_compute
    from bench.predict.calibration import BlockCost, Canary, ComputeCosts, Line
    from bench.predict.compute import plain_step_ms

    def costs(step_ms: float) -> ComputeCosts:  # one block timed at batches 32 and 64, its whole step at 64
        block = BlockCost(Line.fit([(32, 5.0), (64, 10.0)]), Line.fit([(32, 10.0), (64, 20.0)]), 1000, 1.0, 1.0)
        return ComputeCosts([block], 0.0, Line.fit([(32, 0.0), (64, step_ms - 30.0)]))

    canaries = (Canary(threads=2, batch=32, ms=20.0), Canary(threads=2, batch=64, ms=30.0))
    same = lambda: canaries  # noqa: E731 - the machine's canaries did not move
    tries = iter([36.0, 31.0, 30.5])  # a burst of other work, then quiet
    kept, timed = steady_compute(lambda: costs(next(tries)), canaries, same)
    assert plain_step_ms(kept, 64) == pytest.approx(31.0) and "+20% off its canary" in caplog.text
    assert next(tries) == 30.5 and timed == canaries  # within 10% of the canary: not measured a third time
    always = iter([36.0, 40.0, 34.0])  # disturbed every time: the nearest try, said so
    assert plain_step_ms(steady_compute(lambda: costs(next(always)), canaries, same)[0], 64) == pytest.approx(34.0)
    assert "keeping the nearest pair" in caplog.text
    # the canary the one disturbed (its step 43.67 ms, the compute's 30-31 throughout): timed again with it, and
    # the pair that agrees kept, the canaries it was held against with it
    slow = (Canary(2, 32, 29.0), Canary(2, 64, 43.67))
    again = (Canary(2, 32, 20.5), Canary(2, 64, 30.2))
    steps = iter([31.0, 30.0])
    kept, timed = steady_compute(lambda: costs(next(steps)), slow, lambda: again)
    assert plain_step_ms(kept, 64) == pytest.approx(30.0) and timed == again
    # a canary at a batch the blocks were not timed at, or none, checks nothing
    assert plain_step_ms(steady_compute(lambda: costs(50.0), (Canary(2, 16, 30.0),))[0], 64) == pytest.approx(50.0)
    assert steady_compute(lambda: costs(50.0), ())[1] == ()


def test_a_calibration_beyond_the_cores_measures_the_slowdown_of_as_many_processes_as_cores() -> None:
    from bench.predict.calibrate import slowdown_counts

    assert slowdown_counts([4], 2) == [2, 4]  # a sweep of 4 devices alone on 2 cores
    assert slowdown_counts([2, 4], 2) == [2, 4] and slowdown_counts([2], 2) == [2]
    assert slowdown_counts([2, 4], 8) == [2, 4] and slowdown_counts([], 2) == []  # never beyond the cores: as run
