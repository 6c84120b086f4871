"""A prediction travels to the run it predicts, and lands in its record beside the measurement.

The sweep predicts each configuration before it starts the child that runs it, and hands the
prediction over in ``BENCH_PREDICTION`` (JSON); the record then carries it, labelled, with
``prediction_error`` = predicted / measured - 1 of the step time (signed: positive is pessimistic). What the
sweep learns once the run has ended (its canary again) re-scales the prediction in the record (``rescored``).
"""

from __future__ import annotations

import json
import os

PREDICTION_VARIABLE = "BENCH_PREDICTION"
CARRIED = ("predicted_step_time_ms", "predicted_step_time_ms_interval", "predicted_interval_basis",
           "predicted_samples_per_s", "predicted_compute_ms", "predicted_exposed_comm_ms", "predicted_update_ms",
           "predicted_bubble", "predicted_memory_by_kind", "compute_source", "notes", "predicted_timeline", "fitted",
           "canary_ms", "canary_after_ms", "canary_drift", "predicted_step_time_ms_at_calibration")
"""The prediction record's fields a measured record keeps: the report draws the predicted timeline beside the
measured one."""


def handed_over(prediction: dict[str, object]) -> dict[str, str]:
    """The environment entry that hands ``prediction`` (a record of kind prediction) to a child run."""
    return {PREDICTION_VARIABLE: json.dumps({k: prediction.get(k) for k in CARRIED})}


def prediction_fields(measured_step_ms: float) -> dict[str, object]:
    """``prediction`` and ``prediction_error`` for the record of this run, or nothing where none was handed over."""
    text = os.environ.get(PREDICTION_VARIABLE)
    if not text:
        return {}
    prediction = json.loads(text)
    return {"prediction": prediction,
            "prediction_error": signed_error(prediction.get("predicted_step_time_ms"), measured_step_ms)}


def rescored(record: dict[str, object], prediction: dict[str, object]) -> dict[str, object]:
    """A run's ``record`` with ``prediction`` (a record of kind prediction) in place of the one handed over, which
    is kept as ``predicted_step_time_ms_before_run``, and its ``prediction_error`` again."""
    handed = record["prediction"]
    assert isinstance(handed, dict), "rescored takes the record of a run that was handed a prediction"
    carried = {**{k: prediction.get(k) for k in CARRIED},
               "predicted_step_time_ms_before_run": handed.get("predicted_step_time_ms")}
    error = signed_error(carried["predicted_step_time_ms"], record.get("step_time_ms_median"))
    return {**record, "prediction": carried, "prediction_error": error}


def signed_error(predicted: object, measured: object) -> float | None:
    """predicted / measured - 1 (positive: pessimistic); None where either is missing or nought."""
    if isinstance(predicted, float | int) and isinstance(measured, float | int) and predicted and measured:
        return predicted / measured - 1
    return None
