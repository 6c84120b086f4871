"""Verification against single: what ``bench verify`` found and did not check (reports/sections/verification.py)."""

from __future__ import annotations

from pathlib import Path

from bench.harness.records import RECORD_VERSION
from reports.sections.verification import verdict
from tests.helpers.records import repeated
from tests.helpers.reports import built_report


def test_a_verify_row_run_on_fewer_devices_is_not_a_pass(tmp_path: Path) -> None:
    # Old: "dp x2 passed" though verify ran it on one device.
    verify = {"record_version": RECORD_VERSION, "kind": "verify", "strategy": "ddp", "model": "mlp", "devices": 2,
              "max_param_diff": 0.0, "max_loss_diff": 0.0, "passed": True, "norm": "group", "schedule": "gpipe",
              "microbatches": 1, "precision": "fp32", "reason": "ran on 1 device(s), not 2"}
    md, _ = built_report(tmp_path, [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0), verify])
    assert "not checked on 2 devices: ran on 1 device(s), not 2" in md
    assert "verified against single" not in md  # ddp x2 is not verified by a 1-device run


def test_each_verify_row_reads_as_pass_fail_skipped_with_its_reason_or_not_checked() -> None:
    assert verdict({"passed": True, "devices": 2}) == "pass"
    assert verdict({"passed": False, "devices": 2}) == "FAIL"
    assert verdict({"passed": None, "reason": "needs 2 GPUs"}) == "skipped (needs 2 GPUs)"
    assert verdict({"passed": float("nan")}) == "skipped"  # pandas' NaN where other rows have a verdict
    assert verdict({"passed": True, "devices": 2, "reason": "ran on 1 device(s), not 2"}) == \
        "not checked on 2 devices: ran on 1 device(s), not 2"
