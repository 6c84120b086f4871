"""Prediction against measurement: per configuration, per strategy, and whether the ranking holds.

A configuration's error is its predicted step time over the median of its measured (undisturbed)
repeats, minus 1: positive means the prediction was pessimistic. Every predicted figure is labelled so.
Beside it, how far the measurement strays from itself: its repeats' largest distance from their median
(``repeats stray``), and whether the prediction falls inside the repeats' range. An error no larger
than the repeats' own stray cannot be told from the measurement's noise.

A configuration whose own timings entered the calibration (one of its reference runs, bench/predict/runtime.py)
is ``fitted``: its error is in-sample. The summaries headline the ``held out`` configurations and show the
fitted ones apart (``unknown``: a calibration file that predates the distinction).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.scaling import is_pair
from reports.tables import WRONG


def prediction_errors(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per predicted configuration (``runs`` are the combined configurations)."""
    if runs.empty or "predicted_step_time_ms" not in runs or runs["predicted_step_time_ms"].isna().all():
        return pd.DataFrame()
    data = runs.dropna(subset=["predicted_step_time_ms"]).copy()
    data["error"] = data["predicted_step_time_ms"] / data["step_time_ms"] - 1
    low = data.get("step_time_ms_min", data["step_time_ms"])
    high = data.get("step_time_ms_max", data["step_time_ms"])
    data["repeats stray"] = ((high - data["step_time_ms"]).combine(data["step_time_ms"] - low, max)
                             / data["step_time_ms"])
    data["within repeats"] = (data["predicted_step_time_ms"] >= low) & (data["predicted_step_time_ms"] <= high)
    data["measured range ms"] = [f"{a:.3g}-{b:.3g}" for a, b in zip(low, high, strict=True)]
    fitted = data["prediction_fitted"] if "prediction_fitted" in data else pd.Series(None, index=data.index)
    data["timings"] = [SAMPLES[bool(f)] if f in (True, False) else "unknown" for f in fitted]
    intervals = data.get("predicted_step_time_ms_interval", pd.Series(None, index=data.index))
    data["predicted interval ms"] = [f"{i[0]:.3g}-{i[1]:.3g}" if is_pair(i) else "" for i in intervals]
    if "runs_with_interval" in data:  # combined repeats: each run against the interval predicted for it
        judged, inside = data["runs_with_interval"].fillna(0), data["runs_inside_interval"].fillna(0)
    else:  # one row a run
        flags = [i[0] <= m <= i[1] if is_pair(i) else None
                 for i, m in zip(intervals, data["step_time_ms"], strict=True)]
        judged = pd.Series([0 if f is None else 1 for f in flags], index=data.index)
        inside = pd.Series([int(bool(f)) for f in flags], index=data.index)
    data["runs with interval"], data["runs inside"] = judged.astype(int), inside.astype(int)
    table = data.sort_values(["panel", "devices", "variant"])[
        ["panel", "devices", "variant", "global_batch", "timings", "step_time_ms", "measured range ms",
         "predicted_step_time_ms", "predicted interval ms", "runs with interval", "runs inside", "error",
         "repeats stray", "within repeats", "emulated"]]
    return table.rename(columns={"step_time_ms": "measured step ms", "predicted_step_time_ms": "predicted step ms"})




SAMPLES = {False: "held out", True: "fitted"}
"""What ``timings`` says of a configuration: whether its own timings entered the calibration."""


def headline(errors: pd.DataFrame) -> pd.DataFrame:
    """The configurations a summary headlines: the held-out ones, or every one where none is known to be."""
    held_out = errors[errors["timings"] != "fitted"]
    return held_out if not held_out.empty else errors


def error_by_strategy(errors: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, over the headlined configurations: how many, the median and the largest |error|."""
    if errors.empty:
        return errors
    errors = headline(errors)
    strategy = runs.set_index("variant")["strategy"].to_dict()
    data = errors.assign(strategy=[strategy.get(v, v) for v in errors["variant"]], abs_error=errors["error"].abs())
    table = data.groupby("strategy")["abs_error"].agg(["count", "median", "max"]).reset_index()
    return table.rename(columns={"count": "configurations", "median": "median |error|", "max": "max |error|"})


def error_by_devices(errors: pd.DataFrame) -> pd.DataFrame:
    """Per kind of timings (held out first), per device count, then over all: how many configurations, the
    median and the largest |error|."""
    if errors.empty:
        return errors
    data = errors.assign(abs_error=errors["error"].abs())
    rows = []
    for timings in ("held out", "unknown", "fitted"):
        part = data[data["timings"] == timings]
        groups = [(str(devices), group) for devices, group in part.groupby("devices", sort=True)]
        rows += [_summary(timings, name, group) for name, group in [*groups, ("all", part)] if not group.empty]
    return pd.DataFrame(rows)


def _summary(timings: str, devices: str, group: pd.DataFrame) -> dict[str, Any]:
    row: dict[str, Any] = {"timings": timings, "devices": devices, "configurations": len(group),
                              "median |error|": group["abs_error"].median(), "max |error|": group["abs_error"].max()}
    if "repeats stray" in group:  # the measurement's own noise, the floor an error is read against
        row["median repeats stray"] = group["repeats stray"].median()
        row["within repeats"] = f"{int(group['within repeats'].sum())} of {len(group)}"
    if "runs with interval" in group and group["runs with interval"].sum():  # the intervals' coverage, run by run
        judged, inside = int(group["runs with interval"].sum()), int(group["runs inside"].sum())
        row["runs inside predicted interval"] = f"{inside} of {judged}"
    return row


def ranking(runs: pd.DataFrame, fastest: pd.DataFrame) -> pd.DataFrame:
    """Per model, device count and global batch: the predicted winner, whether the measurement agrees (the
    measured winner, or one of a measured tie), and the rank correlation (Spearman) of the two orders."""
    data = runs.dropna(subset=["predicted_step_time_ms"])
    data = data[data["verified"] != WRONG] if "verified" in data else data
    verdicts = {(r["panel"], r["devices"], r["global_batch"]): (str(r["fastest"]), tuple(r["winners"]))
                for r in fastest.to_dict("records")}
    rows = []
    for (panel, devices, batch), group in data.groupby(["panel", "devices", "global_batch"], sort=True):
        if len(group) < 2:
            continue
        measured, winners = verdicts.get((panel, devices, batch), ("", ()))
        rows.append(_agreement(panel, devices, batch, group, measured, winners))
    return pd.DataFrame(rows)


def _agreement(panel: str, devices: int, batch: int, group: pd.DataFrame, measured: str,
               winners: tuple[str, ...]) -> dict[str, Any]:
    predicted_best = group.sort_values("predicted_step_time_ms").iloc[0]["variant"]
    # Spearman's: Pearson's over the ranks (pandas' method="spearman" needs scipy, which the GPU machines lack).
    correlation = group["predicted_step_time_ms"].rank().corr(group["step_time_ms"].rank())
    return {"panel": panel, "devices": devices, "global_batch": batch, "configurations": len(group),
            "predicted fastest": predicted_best, "measured fastest": measured,
            "agrees": predicted_best in winners, "rank correlation": round(float(correlation), 3)}


def pipeline_gap_table(fidelity: pd.DataFrame) -> pd.DataFrame:
    """The predicted account of each targeted pp-vs-mp row (bench/predict/explain.py), then its measurement
    with its interval, and whether the account's last row (the full prediction) lands inside that interval."""
    rows = []
    targeted = fidelity[(fidelity["comparison"] == "pp-vs-mp") & fidelity["held_to_target"]] \
        if "predicted_steps" in fidelity else fidelity.iloc[0:0]
    for _, record in targeted.iterrows():
        steps = record["predicted_steps"]
        if not isinstance(steps, list):
            continue
        for step in steps:
            rows.append({"comparison": record["name"], "counting also": step["added"],
                         "speed-up": f"{step['predicted_speedup']:.2f} (predicted)",
                         "share of ideal": f"{step['predicted_share_of_ideal']:.0%} (predicted)"})
        ideal, share = steps[0]["predicted_speedup"], record["share_of_ideal"]
        interval = record.get("share_of_ideal_interval")
        bounds = interval if is_pair(interval) else None
        rows.append({"comparison": record["name"], "counting also": "measured",
                     "speed-up": f"{share * ideal:.2f}",
                     "share of ideal": f"{share:.0%}" + (f" [{bounds[0]:.0%}, {bounds[1]:.0%}]" if bounds else ""),
                     "account lands": _lands(steps[-1]["predicted_share_of_ideal"], bounds),
                     SIDES: _sides(steps[-1], record)})
    return pd.DataFrame(rows)


SIDES = "PREDICTED step / measured - 1"
"""The account's column of each side's full prediction against its measured step: which side an account misses on."""


def _sides(last: dict, record: pd.Series) -> str:
    """pp's and mp's PREDICTED steps (the account's last row) against the steps the comparison measured; empty for
    a record from before they were kept."""
    sides = [(name, last.get(f"predicted_{name}_ms"), record.get(measured))
             for name, measured in (("pp", "suite_ms"), ("mp", "baseline_ms"))]
    return ", ".join(f"{name} {predicted / measured - 1:+.1%}" for name, predicted, measured in sides
                     if predicted and measured)


def _lands(predicted: float, bounds: list[float] | tuple[float, float] | None) -> str:
    """Whether the full prediction's share of the ideal is inside the measured interval, else how far off."""
    if bounds is None:
        return "- (one round: no interval)"
    low, high = bounds
    if low <= predicted <= high:
        return "inside the measured interval"
    side, gap = ("below", low - predicted) if predicted < low else ("above", predicted - high)
    return f"outside: {predicted:.1%}, {gap * 100:.1f} point(s) {side} it"  # 0.3 points read "0" at whole points
