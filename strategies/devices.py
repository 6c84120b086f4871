"""The devices a process drives: which ones, waiting for them, their peak memory, and whether they are real."""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch


def devices_for(accelerator: str, count: int, first: int = 0) -> tuple[torch.device, ...]:
    """``count`` devices of one kind: ``cuda:first..`` on GPUs, ``count`` times the CPU otherwise."""
    if accelerator == "cuda":
        return tuple(torch.device("cuda", first + i) for i in range(count))
    return tuple(torch.device("cpu") for _ in range(count))


def is_emulated(accelerator: str, devices: int) -> bool:
    """Several devices on one CPU stand in for devices they are not: their timings say nothing about
    GPU scaling. One CPU process is a real CPU device."""
    return accelerator == "cpu" and devices > 1


def synchronize(devices: Iterable[torch.device]) -> None:
    """Waits for queued GPU work, so that a clock read after it measures the work, not its launch
    (nothing to wait for on the CPU)."""
    for index in sorted({d.index or 0 for d in devices if d.type == "cuda"}):
        torch.cuda.synchronize(index)


def synchronized_clock(device: torch.device) -> Callable[[], float]:
    """A clock (seconds) that first waits for ``device``'s queued work, as ``synchronize`` does."""

    def now() -> float:
        synchronize([device])
        return time.perf_counter()

    return now


_STATUS, _CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak_memory(devices: Iterable[torch.device]) -> None:
    """Starts the peaks anew: each GPU's allocator peak, and on the CPU the process's peak resident set
    (Linux: writing 5 to /proc/self/clear_refs resets VmHWM; elsewhere the lifetime peak stays)."""
    devices = list(devices)
    for d in {d for d in devices if d.type == "cuda"}:
        torch.cuda.reset_peak_memory_stats(d)
    if any(d.type == "cpu" for d in devices):
        # Not Linux, or not allowed: peak_memory then reads the lifetime peak.
        with contextlib.suppress(OSError):
            _CLEAR_REFS.write_text("5")


def _peak_rss_bytes() -> int:
    """The process's peak resident set since the last reset (VmHWM), or since it started."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB, macOS bytes


def peak_memory(devices: Iterable[torch.device]) -> tuple[list[int], str]:
    """Peak memory per device and what was measured.

    On GPUs: ``torch.cuda.max_memory_allocated`` per device. On the CPU all "devices" of a
    process share its memory, so the figure is the process's peak resident set size since the last
    ``reset_peak_memory`` (on Linux; elsewhere since the process started), once,
    named as such so that nobody compares it with a GPU's allocator peak.
    """
    devices = list(devices)
    if devices and all(d.type == "cuda" for d in devices):
        return [torch.cuda.max_memory_allocated(d) for d in devices], "cuda_max_memory_allocated"
    return [_peak_rss_bytes()], "process_peak_rss"
