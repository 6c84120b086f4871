"""bench/predict/canary.py: the machine's drift between its calibration and each run, measured and noted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.harness.attach import PREDICTION_VARIABLE
from bench.harness.config import RunConfig, resolve
from bench.predict import for_sweep
from bench.predict.calibration import Calibration
from bench.predict.canary import canary_ms, drift_fields
from tests.helpers.calibrations import equal_blocks


def test_the_canary_is_a_positive_time_and_repeats_within_a_factor() -> None:
    first, second = canary_ms(), canary_ms()
    assert first > 0 and second > 0 and 0.2 < first / second < 5


def test_drift_beyond_ten_percent_is_noted_and_within_it_is_not() -> None:
    slower, note = drift_fields(4.0, 5.2)
    assert slower["canary_drift"] == pytest.approx(1.3) and "1.30x as long as at calibration" in note
    assert drift_fields(4.0, 4.2)[1] == ""
    assert "0.50x" in drift_fields(4.0, 2.0)[1]  # a machine that sped up moved too
    assert drift_fields(None, 4.0)[0]["canary_drift"] is None


def test_a_calibration_keeps_its_canary_through_its_file(tmp_path: Path) -> None:
    calibration = dataclasses.replace(equal_blocks(2), canary_ms=3.5)
    calibration.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json").canary_ms == 3.5


def test_the_sweep_hands_each_run_the_drift_timed_just_before_it(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    predictor = for_sweep.SweepPredictor()
    predictor.calibrations[("mlp", "tiny")] = dataclasses.replace(equal_blocks(4), canary_ms=4.0)
    predictor.sources[("mlp", "tiny")] = "calibration c.json"
    config = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="tiny", devices=2, accelerator="cpu",
                                          out=str(tmp_path / "r.jsonl")))
    for now, noted in ((4.2, False), (6.0, True)):
        monkeypatch.setattr(for_sweep, "canary_ms", lambda now=now: now)
        handed = json.loads(predictor.env_for(config)[PREDICTION_VARIABLE])
        assert handed["canary_ms"] == now and handed["canary_drift"] == pytest.approx(now / 4.0)
        assert any("as long as at calibration" in note for note in handed["notes"]) is noted
