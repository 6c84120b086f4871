"""A short canary step: the same fixed arithmetic timed when the machine is calibrated and again just
before each run the sweep predicts, so that the machine's drift between the two is measured.

Machines of one kind here differ by up to 6x and drift within a run; a calibration taken at one speed
predicts a run at another as if nothing moved. The canary says by how much it did: its ratio rides in
the prediction's record (``canary_drift``), and beyond ``DRIFT_LIMIT`` a note says the prediction rests
on a machine that has since changed speed. It corrects nothing: a run's compute and communication drift
apart, and one ratio cannot say how.
"""

from __future__ import annotations

import time

REPEATS = 7
"""The canary is the quickest of these: noise only adds time."""
DRIFT_LIMIT = 0.10
"""A drift beyond this (10% either way) is noted beside the prediction."""


def canary_ms() -> float:
    """The quickest of ``REPEATS`` timings of one fixed single-thread computation (about 5 ms here)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(256, 256, generator=generator), torch.randn(256, 256, generator=generator)
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(16):
                a = torch.tanh(a @ b)
            times.append((time.perf_counter() - start) * 1e3)
        return min(times)
    finally:
        torch.set_num_threads(threads)


def drift_fields(calibrated_ms: float | None, now_ms: float) -> tuple[dict[str, object], str]:
    """The record's canary fields (now, and its ratio to the calibration), and a note where it moved too far
    (else empty)."""
    if not calibrated_ms:
        return {"canary_ms": now_ms, "canary_drift": None}, "the calibration predates the canary: drift not measured"
    drift = now_ms / calibrated_ms
    note = ""
    if abs(drift - 1) > DRIFT_LIMIT:
        note = (f"the machine ran the canary {drift:.2f}x as long as at calibration (beyond {DRIFT_LIMIT:.0%}): "
                "this prediction rests on a machine that has since changed speed")
    return {"canary_ms": now_ms, "canary_drift": drift}, note
