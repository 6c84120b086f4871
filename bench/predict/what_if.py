"""``bench predict --hardware``: what the run cannot see, per model and strategy, with its assumptions.

Adds to each prediction record the scaling efficiency (its predicted samples/s over devices x one
device's, both predicted from the same source at the same per-device batch), whether its memory fits
the profile's device, and the assumptions behind it; prints the table and the best strategy that fits
at each size. Everything here is PREDICTED.
"""

from __future__ import annotations

from typing import Any

from bench.predict.costs import CostSource, Scenario, predict_step
from bench.predict.hardware import Hardware

ASSUMPTIONS = (
    "compute: roofline per block, max(FLOPs / peak, saved bytes / HBM bandwidth), backward twice the forward: "
    "an upper bound on speed, no kernel reaches its peak",
    "communication: NCCL-style ring over the bus-bandwidth curve inside a node of 8 (NVLink), hierarchical "
    "across nodes over InfiniBand (an assumed curve up to 45 GB/s per GPU)",
    "memory: fp32 parameters, gradients and optimizer state; activations as counted in fp32 on the meta device",
    "no host overhead, no stragglers, no contention between jobs",
)


def what_if_fields(records: list[dict[str, Any]], source: CostSource, hardware: Hardware, precision: str,
                   scaling: str) -> None:
    """Adds ``hardware``, ``predicted_scaling_efficiency``, ``predicted_fits_memory`` and ``assumptions``."""
    one_device: dict[int, float] = {}
    for record in records:
        devices = int(record["device_count"])
        per_device = int(record["global_batch_size"]) // devices
        if per_device not in one_device:
            alone = predict_step(source, Scenario("single", 1, per_device), 1)
            one_device[per_device] = per_device / alone.step_ms * 1e3
        memory = record["predicted_memory_by_kind"]
        total = memory.get("total", 0) if isinstance(memory, dict) else 0
        record.update(
            hardware=hardware.name, precision=precision, scaling=scaling, accelerator=f"{hardware.name} (predicted)",
            predicted_scaling_efficiency=float(record["predicted_samples_per_s"])
            / (devices * one_device[per_device]),
            predicted_fits_memory=total <= hardware.memory_bytes, assumptions=list(ASSUMPTIONS),
        )


def print_predictions(records: list[dict[str, Any]]) -> None:
    """One line per prediction, then the best strategy that fits at each device count (with --hardware)."""
    for r in records:
        extra = ""
        if "predicted_scaling_efficiency" in r:
            fits = "fits" if r["predicted_fits_memory"] else "DOES NOT FIT"
            extra = f"  efficiency {r['predicted_scaling_efficiency']:.2f}  {fits}"
        memory = r["predicted_memory_by_kind"]
        gib = (memory.get("total", 0) if isinstance(memory, dict) else 0) / 2**30
        print(f"{r['strategy']:<7} x{r['device_count']:<4} predicted {r['predicted_step_time_ms']:9.2f} ms/step "
              f"{r['predicted_samples_per_s']:12.1f} samples/s  {gib:7.2f} GiB/device{extra}")
    if records and "hardware" in records[0]:
        for devices in sorted({int(r["device_count"]) for r in records}):
            fitting = [r for r in records if r["device_count"] == devices and r["predicted_fits_memory"]]
            best = max(fitting, key=lambda r: float(r["predicted_samples_per_s"]), default=None)
            print(f"best at {devices} devices (predicted): {best['strategy'] if best else 'none fits'}")
        print("assumptions (all figures PREDICTED, none measured):")
        for line in ASSUMPTIONS:
            print(f"  - {line}")
