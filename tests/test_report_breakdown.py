"""The step-time breakdown (reports/sections/breakdown.py), read from its CSV: measured beside PREDICTED parts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from reports.build import build_report
from reports.load import load
from tests.helpers.records import repeated


def test_each_part_of_a_step_is_its_own_bar_segment_measured_and_predicted(tmp_path: Path) -> None:
    prediction = {"predicted_step_time_ms": 300.0, "predicted_compute_ms": 150.0, "predicted_exposed_comm_ms": 60.0,
                  "predicted_update_ms": 15.0, "predicted_bubble": 0.2}
    runs = [{**r, "prediction": prediction}
            for r in repeated("pp", 2, 250.0, microbatches=4, measured_bubble_fraction=0.3,
                              theoretical_bubble_fraction=0.2, update_fraction=0.1)]
    runs += repeated("ddp", 2, 200.0)  # measured, no parts timed, no prediction
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    build_report(load([path]), tmp_path / "out")
    data = pd.read_csv(tmp_path / "out" / "breakdown.csv").set_index(["configuration", "source", "part"])["ms"]
    step = 64 / 250.0 * 1e3  # 256 ms
    pp = "pp (gpipe, m=4) x2"
    assert data[(pp, "measured", "bubble")] == pytest.approx(0.3 * step)
    assert data[(pp, "measured", "update")] == pytest.approx(0.1 * step)
    assert data[(pp, "measured", "compute + communication")] == pytest.approx(0.6 * step)
    assert data[(pp, "PREDICTED", "compute")] == 150.0 and data[(pp, "PREDICTED", "exposed communication")] == 60.0
    assert data[(pp, "PREDICTED", "bubble")] == pytest.approx(60.0) and data[(pp, "PREDICTED", "update")] == 15.0
    assert data[(pp, "PREDICTED", "other")] == pytest.approx(15.0)  # 300 - 150 - 60 - 60 - 15
    assert data[("ddp x2", "measured", "not broken down")] == pytest.approx(64 / 200.0 * 1e3)
    assert ("ddp x2", "PREDICTED") not in {(c, s) for c, s, _ in data.index}
