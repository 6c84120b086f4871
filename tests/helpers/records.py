"""A small fixed set of records, with known figures, for the report's tests."""

from __future__ import annotations

from bench.records import RECORD_VERSION


def record(strategy: str, devices: int, samples_per_s: float, model: str = "mlp", **fields) -> dict:
    batch = 32 * devices
    step_ms = batch / samples_per_s * 1e3
    config = {"strategy": strategy, "model": model, "preset": "small", "devices": devices, "scaling": "weak",
              "microbatches": fields.pop("microbatches", 1), "schedule": fields.pop("schedule", "gpipe")}
    return {
        "record_version": RECORD_VERSION, "status": "ok", "strategy": strategy, "model": model, "preset": "small",
        "accelerator": "cpu", "device_count": devices, "processes": devices, "emulated": devices > 1,
        "oversubscribed": False, "global_batch_size": batch, "config": config, "step_times_ms": [step_ms] * 3,
        "step_time_ms_median": step_ms, "step_time_ms_iqr": step_ms * 0.1, "samples_per_s": samples_per_s,
        "samples_per_s_per_device": samples_per_s / devices, "peak_mem_bytes": [2**30] * devices,
        "peak_mem_source": "process_peak_rss", "losses": [2.3, 2.2], "loss_first": 2.3, "loss_last": 2.2,
        "flops_per_sample": 1000, "mfu": None, "strategy_fields": fields,
        "env": {"hostname": "testhost", "torch": "2.14.1", "gpu_names": [], "cpu_model": "Test CPU", "cpu_cores": 2},
    }


TIMELINE = [
    {"rank": r, "kind": kind, "microbatch": m, "start_ms": start, "end_ms": start + 1.0}
    for r in range(2)
    for m in range(4)
    for kind, start in (("F", r + m * 1.0), ("B", 6 + (1 - r) + m * 1.0))
]

RECORDS = [
    record("single", 1, 100.0),
    record("ddp", 2, 180.0),
    record("dp", 2, 120.0),
    record("mp", 2, 90.0),
    record(
        "pp", 2, 250.0, microbatches=4, measured_bubble_fraction=0.3, theoretical_bubble_fraction=0.2, timeline=TIMELINE
    ),
    record("pp", 2, 140.0, microbatches=8, measured_bubble_fraction=0.15, theoretical_bubble_fraction=1 / 9),
    record("hybrid", 4, 300.0, microbatches=4, dp=2, pp=2, parts={
        "ddp": {"strategy": "ddp", "devices": 2, "batch_size": 64},
        "pp": {"strategy": "pp", "devices": 2, "batch_size": 64, "microbatches": 4, "schedule": "gpipe",
               "stages_per_rank": 1}}),
    record("single", 1, 50.0, model="cnn"),
    record("ddp", 2, 95.0, model="cnn"),
]
FAILED = {**record("ddp", 4, 1.0), "status": "timeout", "reason": "no result within 60 s"}
VERIFY = [
    {"record_version": RECORD_VERSION, "kind": "verify", "strategy": s, "model": "mlp", "devices": 2,
     "max_param_diff": d, "max_loss_diff": 0.0, "passed": ok}
    for s, d, ok in (("ddp", 1e-7, True), ("pp", 0.5, False), ("mp", 0.0, True))
]
