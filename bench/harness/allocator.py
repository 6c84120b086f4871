"""CPU processes keep the memory they free for their next step, as a GPU's caching allocator does.

PyTorch's CPU allocator hands each tensor to glibc's malloc and frees it as soon as it dies. glibc gives large
freed blocks back to the kernel (those above a threshold it moves at run time are mmapped, and a heap with more
than 128 KiB free at its top is trimmed), and the next step faults the same pages in again, each zeroed by the
kernel. On the 2-core VM the mlp small's plain step at batch 64 on 2 threads, the quickest of 3 timed 20 times in
one process, took 20.4-29.8 ms with thousands of page faults per step, and 20.1-20.9 ms with none once the
process kept its memory. Which of the two a process met depended on its heap's history, not on the machine: a
calibration's steps and a run's disagreed by up to 25% with nothing else running, and a long-lived process
drifted from one to the other while a fresh one beside it did not. A GPU's caching allocator keeps freed
blocks; glibc's own knobs (mallopt) do the same here: mmap only above the largest threshold glibc allows
(32 MiB on 64-bit), and never trim the heap.

``BENCH_KEEP_FREED_MEMORY=0`` leaves glibc's defaults (to time a CPU process as it runs outside the suite);
every record says which was in force (``env.allocator``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

VARIABLE = "BENCH_KEEP_FREED_MEMORY"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 * 2**20
"""glibc's largest M_MMAP_THRESHOLD on 64-bit (4 MiB x sizeof(long)): a larger value is refused."""
TRIM_THRESHOLD = 2**31 - 1
"""The largest a C int holds: never trim, in effect (the heap keeps what its process freed)."""

KEPT = "glibc keeps freed memory (mmap above 32 MiB, no trim)"
SYSTEM = "the C library's defaults"

_in_force = SYSTEM


def keep_freed_memory() -> str:
    """Sets this process's malloc to keep what it frees (inherited by what it forks after) unless
    ``BENCH_KEEP_FREED_MEMORY=0``; returns what is in force, as records name it (``allocator``)."""
    global _in_force
    if os.environ.get(VARIABLE, "1") != "0" and _in_force != KEPT:
        _in_force = KEPT if _mallopt_keeps() else _in_force
    return _in_force


def _mallopt_keeps() -> bool:
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, TypeError, AttributeError):  # not glibc (macOS, musl): its allocator as it is
        return False
    # both: a fixed trim threshold alone also fixes the mmap threshold at its 128 KiB default, and every
    # activation is then mmapped afresh (32 ms a step above, where glibc's defaults took 20-30)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def allocator() -> str:
    """What ``keep_freed_memory`` put in force in this process, or in the one it was forked from."""
    return _in_force
