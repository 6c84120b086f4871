"""Predicted cluster: ``bench predict``'s records (what if), every figure PREDICTED, and what they recommend."""

from __future__ import annotations

import pandas as pd

from reports.context import Context
from reports.predictions import headline, prediction_errors
from reports.render import Section

COLUMNS = ["model", "hardware", "devices", "variant", "global_batch", "predicted samples/s",
           "predicted samples/s per device", "predicted step ms", "predicted scaling efficiency",
           "predicted MiB per device", "predicted fits memory", "predicted bubble"]


def recommendations(ctx: Context) -> pd.DataFrame:
    """Per model, hardware and device count: the predicted fastest configuration that is predicted to fit."""
    data = ctx.results.predictions
    if data.empty:
        return pd.DataFrame()
    rows = []
    for (model, hardware, devices), group in data.groupby(["model", "hardware", "devices"], sort=True):
        fitting = group[group["predicted fits memory"] != "DOES NOT FIT"]
        if fitting.empty:
            rows.append({"model": model, "hardware": hardware, "devices": devices,
                         "use": "none: no configuration is predicted to fit", "predicted samples/s": float("nan")})
            continue
        best = fitting.sort_values("predicted samples/s", ascending=False).iloc[0]
        rows.append({"model": model, "hardware": hardware, "devices": devices, "use": best["variant"],
                     "predicted samples/s": best["predicted samples/s"]})
    return pd.DataFrame(rows)


def measured_error(ctx: Context) -> str:
    """How far the predictor missed where it could be checked: on this machine's runs and on published results."""
    notes = []
    errors = prediction_errors(ctx.runs)
    if not errors.empty:
        shown = headline(errors)
        which = "held-out configurations" if (shown["timings"] == "held out").all() else "configurations"
        notes.append(f"median |error| {shown['error'].abs().median():.0%} over {len(shown)} {which} "
                     "measured here (Prediction vs measurement)")
    published = ctx.results.published
    checked = published[published["status"] == "ok"] if not published.empty else published
    if not checked.empty:
        notes.append(f"median |error| {checked['error'].abs().median():.0%} over {len(checked)} published results "
                     "(Checked against published results)")
    return "; ".join(notes) if notes else "not measured: no run or published result among these records checks it"


def section(ctx: Context) -> Section | None:
    data = ctx.results.predictions
    if data.empty:
        return None
    sources = sorted(set(data["compute from"]))
    recs = recommendations(ctx)
    text = [
        "Every figure here is PREDICTED by `bench predict`, not measured, from: " + "; ".join(sources) + ". "
        f"The predictor's measured error: {measured_error(ctx)}.",
        "PREDICTED recommendation per device count (the fastest predicted to fit in memory): "
        + "; ".join(f"{r['devices']} x {r['hardware']}, {r['model']}: {r['use']}" for r in recs.to_dict("records"))
        + ". A row that DOES NOT FIT is shown with its memory but never recommended."]
    table = data.sort_values(["model", "hardware", "devices", "predicted samples/s"],
                             ascending=[True, True, True, False])
    table = table[[c for c in COLUMNS if c in table.columns]].round(3)
    table.to_csv(ctx.out / "what_if.csv", index=False)
    return Section("Predicted cluster (what if)", text, [table])
