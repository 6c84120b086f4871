"""The report builds from any mix of records the suite writes, and says what each mix can and cannot show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.harness.records import RECORD_VERSION
from reports.build import build_report
from reports.load import load
from tests.helpers.records import RECORDS, VERIFY, record
from tests.helpers.reports import results_jsonl

FIDELITY = {
    "record_version": RECORD_VERSION, "kind": "fidelity", "status": "ok", "comparison": "single-vs-plain-loop",
    "name": "single vs plain PyTorch loop", "model": "mlp", "preset": "small", "target": "within 2%",
    "accelerator": "cpu", "emulated": False, "met": True, "settled": True,
    "figure": "ratio 1.010 [1.000, 1.020]", "env": {"hostname": "fidelityhost", "torch": "2.14.1"},
}
PREDICTION = {
    "record_version": RECORD_VERSION, "kind": "prediction", "status": "ok", "strategy": "tp",
    "model": "transformer", "preset": "large", "device_count": 8, "global_batch_size": 128,
    "predicted_step_time_ms": 80.0, "predicted_samples_per_s": 1600.0, "compute_source": "roofline",
    "hardware": "H200 SXM", "predicted_fits_memory": False, "predicted_scaling_efficiency": 0.5,
    "predicted_memory_by_kind": {"total": 438256 * 2**20},
}

MIXES = {
    "one bench run": [record("single", 1, 100.0)],
    "several bench runs": [record("single", 1, 100.0), record("ddp", 2, 180.0)],
    "all disturbed": [record("single", 1, 100.0, disturbed=True), record("ddp", 2, 180.0, disturbed=True)],
    "a sweep": RECORDS,
    "fidelity alone": [FIDELITY],
    "predictions alone": [PREDICTION],
    "verify alone": VERIFY,
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_the_report_builds_from_any_mix_of_records(mix: str, tmp_path: Path) -> None:
    written = build_report(load([results_jsonl(tmp_path, MIXES[mix])]), tmp_path / "report")
    md = written[0].read_text()
    assert md.startswith("# ") and "## Environment\n" in md
    assert not re.search(r"^\|(\s*\|)+$", md, re.M)  # no row of empty cells (the old Environment of verify)
    assert (tmp_path / "report" / "report.html").read_text().endswith("</html>")


def test_when_every_run_was_disturbed_the_verdict_says_so_instead_of_crashing(tmp_path: Path) -> None:
    # Old code: KeyError "['winners'] not found in axis" (reports/build.py:57), the fastest table being empty.
    md = build_report(load([results_jsonl(tmp_path, MIXES["all disturbed"])]), tmp_path / "r")[0].read_text()
    assert md.count("not ranked: every run was disturbed by other work on the machine") == 2  # 1 and 2 devices


@pytest.mark.parametrize("mix", ["verify alone", "predictions alone"])
def test_records_without_an_environment_add_no_empty_environment_row(mix: str, tmp_path: Path) -> None:
    # Old code: one row of empty cells per environment-less record kind ("|  |  |  |" under Environment).
    md = build_report(load([results_jsonl(tmp_path, MIXES[mix])]), tmp_path / "r")[0].read_text()
    environment = md.split("## Environment\n", 1)[1]
    assert "|" not in environment and "No record carried its machine's environment" in environment


def test_integer_library_versions_print_as_they_were_recorded(tmp_path: Path) -> None:
    # Old code: cuDNN 92400 printed as "92,400" (a float cell with a thousands separator).
    run, other = record("single", 1, 100.0), record("ddp", 2, 180.0)
    run["env"] = {**run["env"], "cudnn": 92400}
    other["env"] = {**other["env"], "hostname": "nocudnn", "cudnn": None}  # a NaN makes the column float
    md = build_report(load([results_jsonl(tmp_path, [run, other])]), tmp_path / "r")[0].read_text()
    assert "| 92400 |" in md and "92,400" not in md
