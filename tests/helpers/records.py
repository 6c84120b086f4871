"""A small fixed set of records, with known figures, for the report's tests."""

from __future__ import annotations

from bench.harness.records import RECORD_VERSION

BATCH = 64
"""Every fixture record's global batch (a strong-scaling sweep): speed-ups compare equal work."""
ROUNDS = (0.99, 1.0, 1.01)
"""The machine's drift, round by round: every configuration measured in a round moves with it, so the
ratios measured side by side are exact while the throughputs spread."""


def record(strategy: str, devices: int, samples_per_s: float, model: str = "mlp", repeat: int = 0,
           disturbed: bool = False, **fields) -> dict:
    batch = BATCH
    step_ms = batch / samples_per_s * 1e3
    memory = fields.pop("memory_by_kind", None)
    config = {"strategy": strategy, "model": model, "preset": "small", "devices": devices, "scaling": "strong",
              "norm": fields.pop("norm", "group"),
              "microbatches": fields.pop("microbatches", 1), "schedule": fields.pop("schedule", "gpipe"),
              "repeat": repeat}
    return {
        "record_version": RECORD_VERSION, "status": "ok", "strategy": strategy, "model": model, "preset": "small",
        "precision": "fp32",
        "accelerator": "cpu", "device_count": devices, "processes": devices, "emulated": devices > 1,
        "oversubscribed": False, "global_batch_size": batch, "config": config, "step_times_ms": [step_ms] * 3,
        "step_time_ms_median": step_ms, "step_time_ms_iqr": step_ms * 0.1, "samples_per_s": samples_per_s,
        "samples_per_s_per_device": samples_per_s / devices, "peak_mem_bytes": [2**30] * devices,
        "peak_mem_source": "process_peak_rss", "losses": [2.3, 2.2], "loss_first": 2.3, "loss_last": 2.2,
        "flops_per_sample": 1000, "mfu": None, "strategy_fields": fields, "disturbed": disturbed,
        "memory_by_kind": memory,
        "env": {"hostname": "testhost", "torch": "2.14.1", "gpu_names": [], "cpu_model": "Test CPU", "cpu_cores": 2},
    }


TIMELINE = [
    {"rank": r, "kind": kind, "microbatch": m, "start_ms": start, "end_ms": start + 1.0}
    for r in range(2)
    for m in range(4)
    for kind, start in (("F", r + m * 1.0), ("B", 6 + (1 - r) + m * 1.0))
]

HYBRID_PARTS = {
    "ddp": {"strategy": "ddp", "devices": 2, "batch_size": 64},
    "pp": {"strategy": "pp", "devices": 2, "batch_size": 64, "microbatches": 4, "schedule": "gpipe",
           "stages_per_rank": 1},
}


def tracked(parameters: float, gradients: float, optimizer_state: float, total: float) -> list[dict]:
    """One device's memory by kind, in MiB, as bench/harness/memory.py records it (in bytes)."""
    mib = {"parameters": parameters, "gradients": gradients, "optimizer_state": optimizer_state, "total": total}
    return [{"device": "cpu", "rank": 0, "tracker": "MemTracker", **{k: int(v * 2**20) for k, v in mib.items()}}]


def repeated(strategy: str, devices: int, samples_per_s: float, **fields: object) -> list[dict]:
    """A configuration's runs, one per round of ROUNDS."""
    return [record(strategy, devices, samples_per_s * drift, repeat=r, **fields) for r, drift in enumerate(ROUNDS)]


RECORDS = [
    *repeated("single", 1, 100.0),
    *repeated("ddp", 2, 180.0),
    *repeated("dp", 2, 120.0),
    *repeated("zero1", 2, 170.0, memory_by_kind=tracked(4, 4, 2, 20)),
    *repeated("fsdp", 2, 150.0, memory_by_kind=tracked(2, 2, 2, 12)),
    *repeated("mp", 2, 90.0),
    *repeated("pp", 2, 250.0, microbatches=4, measured_bubble_fraction=0.3, theoretical_bubble_fraction=0.2,
              timeline=TIMELINE),
    *repeated("pp", 2, 140.0, microbatches=8, measured_bubble_fraction=0.15, theoretical_bubble_fraction=1 / 9),
    *repeated("hybrid", 4, 300.0, microbatches=4, dp=2, pp=2, parts=HYBRID_PARTS),
    *repeated("single", 1, 50.0, model="cnn"),
    *repeated("ddp", 2, 95.0, model="cnn"),
]
FAILED = {**record("ddp", 4, 1.0), "status": "timeout", "reason": "no result within 60 s"}
VERIFY = [
    {"record_version": RECORD_VERSION, "kind": "verify", "strategy": s, "model": "mlp", "devices": 2,
     "max_param_diff": d, "max_loss_diff": 0.0, "passed": ok, "norm": "group", "schedule": "gpipe",
     "microbatches": m, "precision": "fp32"}
    for s, m, d, ok in (("ddp", 1, 1e-7, True), ("pp", 4, 0.5, False), ("mp", 1, 0.0, True))
]
