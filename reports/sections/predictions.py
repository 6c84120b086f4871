"""Prediction vs measurement: each measured run's PREDICTED step time against its median, and the ranking."""

from __future__ import annotations

from reports.context import Context
from reports.predictions import error_by_devices, error_by_strategy, prediction_errors, ranking
from reports.render import Section


def section(ctx: Context) -> Section | None:
    """"Prediction vs measurement", where some measured run carried its prediction."""
    errors = prediction_errors(ctx.runs)
    if errors.empty:
        return None
    errors.to_csv(ctx.out / "prediction.csv", index=False)
    return Section("Prediction vs measurement", [
        "Each configuration's PREDICTED step time (from this machine's `bench calibrate` file) against its "
        "measured median: error = predicted / measured - 1 (positive: pessimistic); an error within `repeats "
        "stray` (the repeats' distance from their median) cannot be told from noise. `timings`: `held out`, or "
        "`fitted` where the configuration's own runs entered the calibration; the summaries headline the held "
        "out."],
        [errors.round(3), error_by_strategy(errors, ctx.runs).round(3), error_by_devices(errors).round(3),
         ranking(ctx.runs, ctx.leaders)])
