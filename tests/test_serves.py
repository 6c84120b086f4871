"""bench/predict/serves.py: which runs a calibration serves: the arithmetic it timed, the device counts it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.harness.config import RunConfig, resolve
from bench.harness.environment import environment
from bench.harness.launch import threads_per_process
from bench.predict.calibrate import machine_identity
from bench.predict.calibration import BlockCost, Calibration, ComputeCosts, Line
from bench.predict.communication import Communication
from bench.predict.curves import Curve
from bench.predict.record import prediction_record
from bench.predict.serves import knob_mismatch

CURVES = {name: Curve([(1, 0.01), (2**30, 1.0)]) for name in
          ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")}


def _calibration(machine: dict[str, object], counts: tuple[int, ...] = (2,)) -> Calibration:
    cost = BlockCost(Line(1.0, 0.0), Line(2.0, 0.0), 1000, 100.0, 10.0)
    costs = ComputeCosts([cost] * 4, 0.0)
    threads = {t: costs for t in {threads_per_process(n) for n in (1, 2, 4)}}
    return Calibration("mlp", "small", "group", "fp32", "cpu", "gloo", machine, threads,
                       {n: Communication(CURVES) for n in counts}, {n: 1.0 for n in counts})


@pytest.mark.parametrize(("changes", "knob"), [({"precision": "bf16"}, "precision bf16 (calibrated: fp32)"),
                                               ({"compile": True}, "compile True (calibrated: False)")])
def test_a_run_in_other_arithmetic_than_the_calibrations_is_not_predicted(changes: dict, knob: str) -> None:
    """Issue 34 item 4: on 4fcc3e2 a bf16 or compiled run got a prediction from fp32 eager timings."""
    calibration = _calibration({})
    config = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="small", devices=2, **changes))
    assert knob in (knob_mismatch(calibration, config) or "")
    with pytest.raises(ValueError, match="timed in other arithmetic"):
        prediction_record(calibration, config, "calibration")
    same = resolve(RunConfig.from_flags(strategy="ddp", model="mlp", preset="small", devices=2, precision="fp32"))
    assert knob_mismatch(calibration, same) is None
    assert prediction_record(calibration, same, "calibration")["predicted_step_time_ms"] > 0


def test_a_channels_last_run_is_not_predicted_from_contiguous_timings() -> None:
    config = resolve(RunConfig.from_flags(strategy="ddp", model="cnn", preset="tiny",
                                          devices=2)).with_flags(channels_last=True)
    assert "channels_last True (calibrated: False)" in (knob_mismatch(_calibration({}), config) or "")


def test_a_device_count_not_calibrated_says_which_count_stood_in(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    _calibration(machine_identity(environment()), counts=(2,)).save(path)
    out = tmp_path / "p.jsonl"
    assert main(["predict", "--calibration", str(path), "--model", "mlp", "--preset", "small", "--strategies",
                 "ddp", "--devices", "2,4", "--out", str(out)]) == 0
    notes = {r["device_count"]: r["notes"] for r in map(json.loads, out.read_text().splitlines())}
    assert notes[2] == []
    assert any("no collectives or runtimes measured on 4 processes: predicted from those measured on 2" in n
               for n in notes[4])
