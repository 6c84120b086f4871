"""bench/predict/record.py: a prediction as a record, with the interval of its calibration's spread."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.harness.config import RunConfig, resolve
from bench.predict.calibration import Calibration
from tests.helpers.calibrations import equal_blocks


def test_a_prediction_carries_the_interval_of_the_calibrations_own_spread_where_its_processes_run(
        tmp_path: Path) -> None:
    from bench.predict.record import prediction_record

    calibration = equal_blocks(4)
    calibration = dataclasses.replace(
        calibration, threads={t: dataclasses.replace(c, spread=0.02) for t, c in calibration.threads.items()},
        communication={2: dataclasses.replace(calibration.communication[2], spread=0.10)})
    path = tmp_path / "cal.json"
    calibration.save(path)
    calibration = Calibration.load(path)  # the spreads survive the file
    for strategy, spread in (("ddp", 0.10), ("single", 0.02), ("mp", 0.02)):  # mp's two stages: one process
        devices = 1 if strategy == "single" else 2
        config = resolve(RunConfig.from_flags(strategy=strategy, model="mlp", preset="tiny", devices=devices,
                                              norm="group",
                                   accelerator="cpu", out=str(tmp_path / "r.jsonl")))
        record = prediction_record(calibration, config, "test")
        step = record["predicted_step_time_ms"]
        assert record["predicted_step_time_ms_interval"] == pytest.approx([step / (1 + spread), step * (1 + spread)])
