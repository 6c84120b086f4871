"""A canary step: the calibrated model's own plain training step, timed where each layout of processes runs when
the machine is calibrated and again just before each run the sweep predicts, so that the machine's drift between
the two is measured and taken out of the prediction.

Machines of one kind here differ by up to 6x and drift within a run; a calibration taken at one speed predicts a
run at another as if nothing moved. A fixed arithmetic canary did not see it: a 256 x 256 matmul chain on one
thread read 6.56-6.90 ms on the 2-core VM while the small mlp's `bench run single` went from 21.9-22.6 ms to
25.7-27.1 within a minute and stayed there. Its own step, timed just before each run with as many threads and
samples as one of the run's processes has (the quickest of ``STEPS``), moved with it: 20.2-20.5 ms, then
24.6-25.7, the runs 1.01-1.12 times the canary before them throughout (12 pairs). The shift was one of the two
cores': the same step on one thread (a 2-process run's layout) read 21.1-22.5 ms throughout.

So the prediction handed to a run is scaled by the drift of its layout's canary, taken halfway (``taken_out``,
``corrected``), its figure at calibration kept beside it (``predicted_step_time_ms_at_calibration``); beyond
``DRIFT_LIMIT`` a note says the machine changed speed since. Once the run has ended the sweep times the canary
again and its record's prediction is scaled by both readings instead (``bracketed``), the one handed over kept
as ``predicted_step_time_ms_before_run``. One ratio for the whole step: the parts that do not
compute (a collective's wait, a pipeline's idle time) are assumed to move with the cores that run them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from bench.harness.ranks import like_a_run, torch_threads
from bench.predict.calibration import Canary
from bench.predict.compute import whole_step_ms
from models.spec import ModelSpec
from strategies.cost_model import threads_per_process

STEPS = 3
"""The canary is the quickest of these plain steps (after one warm-up): noise only adds time."""
DRIFT_LIMIT = 0.10
"""A drift beyond this (10% either way) is noted beside the prediction."""
TAKEN_OUT = 0.5
"""How much of a measured drift the prediction takes out, in log terms (scaled by drift ** TAKEN_OUT): a canary
is a noisy reading of the machine's speed, and a noisy reading is shrunk toward no change. On the 2-core VM two
readings of one layout's canary in one target sweep differed by a standard deviation of 2.8-3.8% (each
reading's noise that over root 2) where the sweep's drifts spread by 3.4-4.9%: a third to a half of their
variance noise. Re-scored from the records (held-out configurations, median |error|): the whole drift taken
out, 5.0% over three target sweeps (276 configurations) and 5.0% over eight main jobs (64); none, 4.2% and
5.5%; half, 4.6% and 4.8%, and better in each target sweep (5.8 -> 5.0%, 4.7 -> 4.0%, 4.8 -> 4.2%). Chosen on
those records, so held out only from later sweeps; a shrinkage estimated in each sweep from its own canaries as
they came did worse (4.8% over the target sweeps, 5.4% over the main jobs)."""


def taken_out(drift: float | None) -> float | None:
    """The factor a prediction is scaled by for a measured ``drift`` (``TAKEN_OUT``); None where none was measured."""
    return None if drift is None else drift ** TAKEN_OUT


def canary_ms(make_spec: Callable[[], ModelSpec], batch: int, threads: int, build_optimizer: Callable,
              device: torch.device, timeout_s: float = 120.0) -> float:
    """The quickest of ``STEPS`` plain training steps of ``make_spec()``'s model at ``batch`` samples on
    ``threads`` threads, where a run's process would time them (``ranks.like_a_run``: on a CPU a forked process,
    not the calibrating or sweeping one). Timed in the sweep's own process, the one-thread canary read 2-7% above
    its calibration through a main job whose runs had not moved, and twice 18-19% above (a burst there) where the
    runs beside it read as predicted."""
    return like_a_run(device.type, _time_canary, make_spec, batch, threads, build_optimizer, device,
                      timeout_s=timeout_s)


def _time_canary(make_spec: Callable[[], ModelSpec], batch: int, threads: int, build_optimizer: Callable,
                 device: torch.device) -> float:
    with torch_threads(threads):
        return min(whole_step_ms(make_spec(), batch, build_optimizer, device, STEPS))


def canary_layout(global_batch: int, processes: int, microbatches: int) -> tuple[int, int]:
    """The threads and samples of the canary for a run of ``processes`` processes (each with its share of the
    cores) stepping ``global_batch`` in ``microbatches`` passes: one pass of one of its processes. In a main job
    whose 2-thread canary at 64 samples moved 1.17-1.24x, single and ddp on one device (64 a pass) moved with
    it and mp (16 a pass, 2 threads too) did not: scaled by it, mp came out 20% over where it had been 2% under."""
    return threads_per_process(processes), max(1, global_batch // (processes * microbatches))


def bracketed(before_ms: float, after_ms: float) -> float:
    """The canary over a run, from its readings just before and just after it: their geometric mean.

    The 2-core VM's cores switch between speeds within a run as often as between runs: the small transformer's 8
    micro-batches of 2 samples on 2 threads, a plain loop in fresh processes with the suite's allocator setting,
    took 195-232 ms a step in 9 of 12 and 305-311 in 3. Each of those runs between two canaries of its layout: the
    log spread of run over canary ** 0.5 was 16.1% with the canary before, 13.2% with both (16.7% of the runs
    alone); twelve earlier such runs without the allocator setting: 10.0% and 6.8% (12.4%). Over a quieter target
    sweep it made no difference beyond the noise (docs/predictor.md, "The canary timed after the run too")."""
    return math.sqrt(before_ms * after_ms)


def drift_fields(calibrated: Canary | None, now_ms: float | None,
                 after_ms: float | None = None) -> tuple[dict[str, object], str]:
    """The record's canary fields (before the run, after it where timed, and the ratio of their ``bracketed``
    reading, else of the one before, to the calibration's), and a note where it moved too far (else empty)."""
    if calibrated is None or now_ms is None:
        return {"canary_ms": now_ms, "canary_drift": None}, "the calibration timed no canary here: drift not measured"
    fields: dict[str, object] = {"canary_ms": now_ms}
    notes = []
    if after_ms is not None:
        fields["canary_after_ms"] = after_ms
        if abs(after_ms / now_ms - 1) > DRIFT_LIMIT:
            notes.append(f"the canary read {now_ms:.3g} ms before the run and {after_ms:.3g} after it: the "
                         "machine's speed moved during the run")
    drift = (now_ms if after_ms is None else bracketed(now_ms, after_ms)) / calibrated.ms
    if abs(drift - 1) > DRIFT_LIMIT:
        notes.append(f"the machine ran the canary {drift:.2f}x as long as at calibration (beyond {DRIFT_LIMIT:.0%}): "
                     f"the prediction is scaled by {taken_out(drift):.2f}, that drift taken out halfway")
    return {**fields, "canary_drift": drift}, "; ".join(notes)


SCALED = ("predicted_step_time_ms", "predicted_compute_ms", "predicted_exposed_comm_ms", "predicted_update_ms")


def corrected(prediction: dict[str, object], drift: float | None) -> dict[str, object]:
    """``prediction`` (a record of kind prediction) with every time scaled by ``drift`` and its step time at
    calibration kept as ``predicted_step_time_ms_at_calibration``; as it is where no drift was measured."""
    out = {**prediction, "predicted_step_time_ms_at_calibration": prediction["predicted_step_time_ms"]}
    if drift is None:
        return out
    for key in SCALED:
        if isinstance(value := prediction.get(key), float | int):
            out[key] = value * drift
    if isinstance(interval := prediction.get("predicted_step_time_ms_interval"), list):
        out["predicted_step_time_ms_interval"] = [bound * drift for bound in interval]
    if isinstance(rate := prediction.get("predicted_samples_per_s"), float | int):
        out["predicted_samples_per_s"] = rate / drift
    if isinstance(timeline := prediction.get("predicted_timeline"), list):
        out["predicted_timeline"] = [{**span, "start_ms": span["start_ms"] * drift, "end_ms": span["end_ms"] * drift}
                                     for span in timeline]
    return out
