"""Peak FLOP/s of known GPUs, for MFU and the predictor's GPU profiles (bench/predict/profiles.py): the one
data-sheet table (clocks and memory: strategies/devices.py). Imports no torch: the published checks read it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Dense peak FLOP/s from the vendors' data sheets (the sparse figures halved), by precision. MFU is
# left out where the device is not in this table: a made-up peak would make a made-up MFU. The
# form factor matters: an H100 PCIe peaks 24% below the SXM part, an H200 NVL 16% below the H200.
_HOPPER_SXM = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12}
_HOPPER_NVL = {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12}
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200 SXM": _HOPPER_SXM,
    "H200 NVL": _HOPPER_NVL,
    "GH200": _HOPPER_SXM,
    "H100 SXM": _HOPPER_SXM,
    "H100 NVL": _HOPPER_NVL,
    "H100 PCIe": {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
    # 40 GB and 80 GB, SXM4 and PCIe: one set of peaks on every data sheet.
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
}

_SXM_DEFAULT = ("H100", "H200")
"""Parts whose name says nothing of the form factor when it is SXM ("NVIDIA H200", "NVIDIA H100 80GB HBM3")."""


def gpu_part(name: str) -> str | None:
    """The ``PEAK_FLOPS`` key of a device name as torch reports it, matched by whole words, or None.

    "NVIDIA H100 PCIe" -> "H100 PCIe", "NVIDIA H200 NVL" -> "H200 NVL", "NVIDIA A100-SXM4-80GB" -> "A100";
    "NVIDIA GH200 480GB" is not an H200, nor "NVIDIA H20" nor "NVIDIA A10" an H200 or an A100.
    """
    words = [w.upper() for w in re.split(r"[\s\-_]+", name) if w]
    for model in ("GH200", "H200", "H100", "A100"):
        if model not in words:
            continue
        if model in _SXM_DEFAULT:
            form = "PCIe" if "PCIE" in words else "NVL" if "NVL" in words else "SXM"
            key = f"{model} {form}"
            return key if key in PEAK_FLOPS else None
        return model
    return None


def peak_flops_per_s(device: torch.device, precision: str) -> float | None:
    """The data-sheet peak for this GPU and precision, or None where it is not known (and on CPUs)."""
    if device.type != "cuda":
        return None
    import torch

    part = gpu_part(torch.cuda.get_device_name(device))
    return PEAK_FLOPS[part].get(precision) if part is not None else None
