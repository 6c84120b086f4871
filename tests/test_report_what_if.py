"""Predicted cluster: ``bench predict``'s what-if records and what they recommend (reports/sections/what_if.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from reports.context import context
from reports.load import load
from reports.sections.what_if import measured_error, recommendations
from tests.helpers.reports import built_report, what_if_record


def test_what_if_keeps_fits_memory_and_efficiency_and_never_recommends_what_does_not_fit(tmp_path: Path) -> None:
    # Old: prediction_row dropped predicted_fits_memory and predicted_scaling_efficiency (tp on 8 H200s shown at
    # 438,256 MiB per device with no word that it does not fit).
    md, out = built_report(tmp_path, [what_if_record("tp", 8, 2000.0, False, 0.95),
                                      what_if_record("ddp", 8, 1500.0, True, 0.9)])
    table = pd.read_csv(out / "what_if.csv").set_index("variant")
    assert table.loc["tp", "predicted fits memory"] == "DOES NOT FIT"
    assert table.loc["ddp", "predicted scaling efficiency"] == pytest.approx(0.9)
    assert table.loc["tp", "predicted MiB per device"] == pytest.approx(438256)
    assert "8 x H200 SXM, transformer/large: ddp" in md  # tp is faster but does not fit
    assert "PREDICTED, transformer/large on 8 x H200 SXM: **ddp**" in md


def test_a_device_count_where_nothing_is_predicted_to_fit_recommends_none(tmp_path: Path) -> None:
    path = tmp_path / "what_if.jsonl"
    rows = [what_if_record("tp", 8, 2000.0, False, 0.95), what_if_record("ddp", 8, 1500.0, False, 0.9),
            what_if_record("tp", 64, 12000.0, True, 0.7), what_if_record("ddp", 64, 9000.0, True, 0.8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ctx = context(load([path]), tmp_path)
    eight, sixty_four = recommendations(ctx).to_dict("records")
    assert eight["devices"] == 8 and eight["use"] == "none: no configuration is predicted to fit"
    assert math.isnan(eight["predicted samples/s"])
    assert sixty_four["use"] == "tp" and sixty_four["predicted samples/s"] == 12000.0  # the faster of two that fit
    assert measured_error(ctx) == "not measured: no run or published result among these records checks it"
