"""Prediction vs measurement: the PREDICTED step times' errors summed up and the ranking in the body, each
configuration's prediction against its median in the appendix."""

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
        "out. The predicted interval is the calibration's own spread (half the range of its repeats), widened in "
        "a sweep to the 80% quantile of the held-out errors of the runs measured before it (its strategy's once "
        "it has four; each record's "
        "`predicted_interval_basis`); the summaries count the runs whose measured step fell inside the interval "
        "predicted for it (coverage; a configuration shows its last run's interval). Each "
        "configuration: Appendix."],
        [error_by_strategy(errors, ctx.runs).round(3), error_by_devices(errors).round(3),
         ranking(ctx.runs, ctx.leaders)])


def per_configuration(ctx: Context) -> Section | None:
    """Each predicted configuration's figures (the appendix's evidence behind the summaries)."""
    errors = prediction_errors(ctx.runs)
    if errors.empty:
        return None
    return Section("Prediction per configuration", [
        "PREDICTED against measured, one row per configuration (also in `prediction.csv`)."], [errors.round(3)],
        appendix=True)
