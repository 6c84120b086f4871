"""Peak FLOP/s of known GPUs, for MFU (clocks and memory: strategies/devices.py)."""

from __future__ import annotations

import torch

# Dense peak FLOP/s from the vendors' data sheets (SXM parts), by precision. MFU is left out
# where the device is not in this table: a made-up peak would make a made-up MFU.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "H100": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
}


def peak_flops_per_s(device: torch.device, precision: str) -> float | None:
    """The data-sheet peak for this GPU and precision, or None where it is not known (and on CPUs)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAK_FLOPS.items():
        if key in name:
            return peaks.get(precision)
    return None
