"""bench/predict/what_if.py: the what-if table, and the best strategy that fits at each device count."""

from __future__ import annotations

import pytest


def test_the_best_named_is_the_fastest_that_fits_not_the_fastest(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.predict.what_if import print_predictions

    def record(strategy: str, devices: int, samples_per_s: float, fits: bool) -> dict:
        return {"strategy": strategy, "device_count": devices, "predicted_step_time_ms": 1.0,
                "predicted_samples_per_s": samples_per_s, "predicted_memory_by_kind": {"total": 0},
                "predicted_scaling_efficiency": 1.0, "predicted_fits_memory": fits, "hardware": "h200"}

    print_predictions([record("tp", 8, 900.0, False), record("fsdp", 8, 500.0, True), record("ddp", 8, 400.0, True),
                       record("tp", 16, 900.0, False)])
    out = capsys.readouterr().out
    assert "best at 8 devices (predicted): fsdp\n" in out and "best at 16 devices (predicted): none fits\n" in out


def test_each_record_gains_its_scaling_over_one_device_at_its_per_device_batch_and_whether_it_fits() -> None:
    from bench.predict.costs import predict_step
    from bench.predict.hardware import RooflineSource, profile
    from bench.predict.scenario import Scenario
    from bench.predict.what_if import what_if_fields

    hardware = profile("h200", (8,))
    source = RooflineSource(hardware, "mlp", "tiny", "batch", "bf16")
    one_device = 8 / predict_step(source, Scenario("single", 1, 8), 1).step_ms * 1e3  # samples/s at 8 a device
    records = [{"device_count": 8, "global_batch_size": 64, "predicted_samples_per_s": 4 * one_device,
                "predicted_memory_by_kind": {"total": hardware.memory_bytes}},
               {"device_count": 2, "global_batch_size": 16, "predicted_samples_per_s": 2 * one_device,
                "predicted_memory_by_kind": {"total": hardware.memory_bytes + 1}}]
    rests_on = what_if_fields(records, source, hardware, "bf16", "weak")
    assert [r["predicted_scaling_efficiency"] for r in records] == pytest.approx([0.5, 1.0])
    assert [r["predicted_fits_memory"] for r in records] == [True, False]
    assert all(r["assumptions"] is rests_on and r["accelerator"] == "H200 SXM (predicted)" for r in records)
    assert rests_on[0] == f"profile h200: {hardware.source}"
