"""Checked against published results: ``bench predict --published`` records read beside every other kind."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.records import RECORD_VERSION
from reports.build import build_report
from reports.load import load
from tests.helpers.records import record


def published(pid: str, value: float, predicted: float | None, status: str = "ok", reason: str = "") -> dict:
    row = {"record_version": RECORD_VERSION, "kind": "prediction", "published_id": pid, "metric": "samples_per_s",
           "status": status, "reason": reason}
    if status == "ok":
        row.update(published_value=value, predicted_value=predicted, error=predicted / value - 1)
    return row


ROWS = [published("resnet50-ddp-1xa100", 1000.0, 1100.0), published("resnet50-ddp-8xa100", 8000.0, 6400.0),
        published("llama8b-fsdp-8xh100", 100.0, 95.0),
        published("mpt70b-fsdp-128xh100", 0, None, status="skipped", reason="ALiBi positions not expressible")]
WHAT_IF = {"record_version": RECORD_VERSION, "kind": "prediction", "status": "ok", "strategy": "ddp",
           "model": "transformer", "preset": "large", "device_count": 8, "global_batch_size": 128,
           "predicted_step_time_ms": 80.0, "predicted_samples_per_s": 1600.0, "compute_source": "roofline"}


def test_published_checks_show_median_and_largest_error_and_every_skip_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "published.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, WHAT_IF, record("single", 1, 100.0)]))
    results = load([path])
    assert len(results.published) == 4 and len(results.predictions) == 1 and len(results.runs) == 1
    out = tmp_path / "r"
    build_report(results, out)
    md = (out / "report.md").read_text()
    # |errors| 10%, 20%, 5%: median 10%, largest 20% (the 8-GPU ResNet).
    assert "3 rows checked, 1 skipped" in md
    assert "Median |error| 10.0%, largest 20.0% (resnet50-ddp-8xa100)." in md
    assert "| mpt70b-fsdp-128xh100 | samples_per_s | ALiBi positions not expressible |" in md
    data = pd.read_csv(out / "published.csv").set_index("published_id")
    assert data.loc["resnet50-ddp-8xa100", "error"] == pytest.approx(-0.2)
    # The what-if section quotes the predictor's measured error on them.
    assert "median |error| 10% over 3 published results" in md


def test_a_published_record_missing_its_values_is_refused_by_name(tmp_path: Path) -> None:
    from bench.harness.records import RecordError

    broken = {k: v for k, v in ROWS[0].items() if k != "predicted_value"}
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(RecordError, match="lacks predicted_value"):
        load([path])
