"""Clocks, memory and peak FLOP/s: what the runner reads from the devices."""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterable

import torch

# One definition for the runner's clock and the strategies' own timers.
from strategies.timing import synchronize  # noqa: F401

# Dense peak FLOP/s from the vendors' data sheets (SXM parts), by precision. MFU is left out
# where the device is not in this table: a made-up peak would make a made-up MFU.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "H100": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
}


def reset_peak_memory(devices: Iterable[torch.device]) -> None:
    for d in {d for d in devices if d.type == "cuda"}:
        torch.cuda.reset_peak_memory_stats(d)


def peak_memory(devices: Iterable[torch.device]) -> tuple[list[int], str]:
    """Peak memory per device and what was measured.

    On GPUs: ``torch.cuda.max_memory_allocated`` per device. On the CPU all "devices" of a
    process share its memory, so the figure is the process's peak resident set size, named
    as such so that nobody compares it with a GPU's allocator peak.
    """
    devices = list(devices)
    if devices and all(d.type == "cuda" for d in devices):
        return [torch.cuda.max_memory_allocated(d) for d in devices], "cuda_max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB, macOS bytes
    return [rss_bytes], "process_peak_rss"


def peak_flops_per_s(device: torch.device, precision: str) -> float | None:
    """The data-sheet peak for this GPU and precision, or None where it is not known (and on CPUs)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAK_FLOPS.items():
        if key in name:
            return peaks.get(precision)
    return None
