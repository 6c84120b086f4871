"""bench/predict/for_sweep.py: the calibrations a sweep takes or reuses, and the prediction it hands each run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.harness.attach import PREDICTION_VARIABLE
from bench.harness.config import RunConfig, resolve
from bench.harness.records import RECORD_VERSION
from bench.predict import for_sweep
from bench.predict.calibration import Canary
from tests.helpers.calibrations import equal_blocks


def test_a_failed_calibration_costs_its_model_s_predictions_not_the_sweep(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:

    def failing(config: object, *args: object, **kwargs: object) -> None:
        raise ValueError("Expected more than 1 value per channel when training")

    monkeypatch.setattr(for_sweep, "calibrate", failing)
    configs = [resolve(RunConfig.from_flags(model=model, preset="tiny", out=str(tmp_path / "sweep.jsonl")))
               for model in ("mlp", "cnn")]
    predictor = for_sweep.sweep_predictor("auto", configs, (2,), (4,), tmp_path / "sweep.jsonl")
    assert predictor.calibrations == {}
    assert "cnn/tiny is not predicted: its calibration failed: ValueError: Expected more than 1" in caplog.text


def test_the_sweep_hands_each_run_the_drift_of_its_layout_timed_just_before_it_and_scales_its_prediction(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    predictor = for_sweep.SweepPredictor()
    canaries = (Canary(threads=2, batch=8, ms=3.0), Canary(threads=1, batch=4, ms=4.0), Canary(1, 2, 9.0))
    predictor.calibrations[("mlp", "tiny")] = dataclasses.replace(equal_blocks(4), canaries=canaries)
    predictor.sources[("mlp", "tiny")] = "calibration c.json"
    config = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="tiny", devices=2, accelerator="cpu",
                                          out=str(tmp_path / "r.jsonl")))
    timed = []
    # within 10%: timed once; beyond it, timed again and the quicker kept (a burst passes, a shift stays)
    for canaries_now, now, noted in (([4.2], 4.2, False), ([6.5, 6.0], 6.0, True), ([4.8, 5.2], 4.8, True)):
        readings = iter(canaries_now)
        monkeypatch.setattr(for_sweep, "canary_ms", lambda make_spec, batch, threads, *_, readings=readings:
                            timed.append((batch, threads)) or next(readings))
        handed = json.loads(predictor.env_for(config)[PREDICTION_VARIABLE])
        assert next(readings, None) is None
        assert handed["canary_ms"] == now and handed["canary_drift"] == pytest.approx(now / 4.0)
        assert any("as long as at calibration" in note for note in handed["notes"]) is noted
        # the drift taken out halfway (canary.TAKEN_OUT): the whole of it, a noisy reading, did worse
        assert handed["predicted_step_time_ms"] == pytest.approx(handed["predicted_step_time_ms_at_calibration"]
                                                                 * (now / 4.0) ** 0.5)
    assert set(timed) == {(4, 1)}  # a 2-process run's layout: one thread, half the batch


def test_each_prediction_s_interval_takes_the_errors_of_the_runs_measured_before_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    predictor = for_sweep.SweepPredictor(out=out)
    predictor.calibrations[("mlp", "tiny")] = equal_blocks(4)
    predictor.sources[("mlp", "tiny")] = "calibration c.json"
    config = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="tiny", devices=2, accelerator="cpu",
                                          out=str(out)))

    def handed() -> dict:
        return json.loads(predictor.env_for(config)[PREDICTION_VARIABLE])

    first = handed()
    assert "too few" in first["predicted_interval_basis"]
    step = first["predicted_step_time_ms"]
    # four runs measured 30% above their prediction: the next interval reaches them
    rows = [{"record_version": RECORD_VERSION, "status": "ok", "disturbed": False, "step_time_ms_median": step * 1.3,
             "prediction": {**first, "fitted": False}} for _ in range(4)]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    later = handed()
    assert later["predicted_step_time_ms_interval"] == pytest.approx([step / 1.3, step * 1.3])
    assert later["predicted_interval_basis"].startswith("the 80% quantile of 4 earlier held-out errors")


def test_once_the_run_has_ended_its_canary_is_timed_again_and_its_record_rescored_by_both_readings(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    predictor = for_sweep.SweepPredictor()
    predictor.calibrations[("mlp", "tiny")] = dataclasses.replace(equal_blocks(4), canaries=(Canary(1, 4, 4.0),))
    predictor.sources[("mlp", "tiny")] = "calibration c.json"
    config = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="tiny", devices=2, accelerator="cpu",
                                          out=str(out)))
    readings = iter([4.0, 9.0])  # the canary before the run, as calibrated; after it, 2.25x as long
    monkeypatch.setattr(for_sweep, "canary_ms", lambda *_: next(readings))
    handed = json.loads(predictor.env_for(config)[PREDICTION_VARIABLE])
    at_calibration = handed["predicted_step_time_ms_at_calibration"]
    assert handed["predicted_step_time_ms"] == pytest.approx(at_calibration)
    run = {"record_version": RECORD_VERSION, "status": "ok", "config": config.as_dict(), "step_time_ms_median": 5.0,
           "prediction": handed, "prediction_error": handed["predicted_step_time_ms"] / 5.0 - 1}
    out.write_text(json.dumps({**run, "config": {**config.as_dict(), "devices": 4}}) + "\n" + json.dumps(run) + "\n")
    assert predictor.after_run(config, out, measured=True)
    other, amended = (json.loads(line) for line in out.read_text().splitlines())
    drift = (4.0 * 9.0) ** 0.5 / 4.0  # 1.5: both readings' geometric mean, taken out halfway
    assert amended["prediction"]["predicted_step_time_ms"] == pytest.approx(at_calibration * drift ** 0.5)
    assert amended["prediction"]["canary_after_ms"] == 9.0 and amended["prediction"]["canary_drift"] == 1.5
    assert amended["prediction"]["predicted_step_time_ms_before_run"] == pytest.approx(at_calibration)
    assert amended["prediction_error"] == pytest.approx(at_calibration * drift ** 0.5 / 5.0 - 1)
    assert "during the run" in " ".join(amended["prediction"]["notes"]) and other["prediction"] == handed
    assert not predictor.after_run(config, out, measured=True)  # once: nothing handed over is left


def test_a_sweep_of_no_interleaved_schedule_calibrates_without_the_variants_and_one_that_has_them_not_reusing_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """pp's interleaved reference runs fit only the residuals of several stages a rank: a sweep without them skips
    them, and a later sweep that needs them calibrates again rather than predicting from pp's one-stage terms."""
    from bench.predict.runtime import fitted_key

    asked: list[bool] = []

    def calibrated(config: RunConfig, *args: object, variants: bool = True, **kwargs: object) -> object:
        asked.append(variants)
        runs = [config.with_flags(strategy="pp", devices=2, microbatches=4, schedule=schedule, stages_per_rank=v)
                for schedule, v in [("gpipe", 1), *([("interleaved-1f1b", 2)] if variants else [])]]
        return dataclasses.replace(equal_blocks(4), fitted_runs=tuple(fitted_key(c) for c in runs))

    monkeypatch.setattr(for_sweep, "calibrate", calibrated)
    monkeypatch.setattr(for_sweep, "machine_identity", lambda env: dict(equal_blocks(1).machine))
    out = tmp_path / "sweep.jsonl"
    gpipe = resolve(RunConfig.from_flags(strategy="pp", devices=2, microbatches=4, model="mlp", preset="tiny",
                                         out=str(out)))
    interleaved = gpipe.with_flags(schedule="interleaved-1f1b", stages_per_rank=2)
    assert not for_sweep.needs_variants([gpipe]) and for_sweep.needs_variants([gpipe, interleaved])
    for configs in ([gpipe], [gpipe], [gpipe, interleaved], [gpipe, interleaved], [gpipe]):
        assert for_sweep.sweep_predictor("auto", configs, (1, 2), (4,), out).calibrations
    assert asked == [False, True]  # then reused by both kinds of sweep
    assert "ran no reference run of several stages a rank" in caplog.text


def test_a_run_of_the_layout_just_read_after_the_previous_run_starts_from_that_reading(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The same step timed again a moment later says the same: only the run right after takes it, of its layout."""
    out = tmp_path / "sweep.jsonl"
    predictor = for_sweep.SweepPredictor()
    canaries = (Canary(1, 4, 4.0), Canary(2, 8, 3.0))
    predictor.calibrations[("mlp", "tiny")] = dataclasses.replace(equal_blocks(4), canaries=canaries)
    predictor.sources[("mlp", "tiny")] = "calibration c.json"
    ddp = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="tiny", devices=2, accelerator="cpu",
                                       out=str(out)))
    zero1, single = ddp.with_flags(strategy="zero1"), ddp.with_flags(strategy="single", devices=1)
    readings = iter([4.0, 4.2, 3.0, 3.1, 4.3])
    timed: list[float] = []
    monkeypatch.setattr(for_sweep, "canary_ms", lambda *_: timed.append(reading := next(readings)) or reading)
    monkeypatch.setattr(for_sweep, "amend_newest", lambda *_: True)

    def before(config: RunConfig) -> float:
        return json.loads(predictor.env_for(config)[PREDICTION_VARIABLE])["canary_ms"]

    assert before(ddp) == 4.0 and predictor.after_run(ddp, out, measured=True)  # after it: 4.2
    assert before(zero1) == 4.2 and len(timed) == 2  # its layout's reading just taken: not timed again
    assert before(single) == 3.0  # another layout: timed
    assert predictor.after_run(single, out, measured=True)  # 3.1
    assert not predictor.after_run(zero1, out, measured=False)
    assert before(ddp) == 4.3 and len(timed) == 5  # the reading after single's run is not its layout's
