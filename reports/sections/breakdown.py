"""Where the step time goes: per configuration, measured beside PREDICTED, stacked by part of the step.

Measured parts exist where the run timed them (a pipeline's bubble and update); the rest of a measured step
is one bar, "not broken down". Predicted parts are the predictor's: compute, exposed communication, bubble,
update, and what is left of its step ("other")."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from reports import figures
from reports.context import Context
from reports.render import Section

PARTS = {"compute": "#4c72b0", "exposed communication": "#dd8452", "bubble": "#c44e52", "update": "#55a868",
         "other": "#8c8c8c", "compute + communication": "#64b5cd", "not broken down": "#b0b0b0"}


def _value(row: dict, column: str) -> float:
    value = row.get(column)
    return 0.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _known(value: object) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def parts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and source (measured, PREDICTED) and part: ms of the step."""
    rows = []
    for r in runs.to_dict("records"):
        label = f"{r['variant']} x{r['devices']}"
        step = float(r["step_time_ms"])
        if _known(r.get("bubble_measured")):
            bubble, update = _value(r, "bubble_measured") * step, _value(r, "update_fraction") * step
            measured = {"compute + communication": step - bubble - update, "bubble": bubble, "update": update}
        else:
            measured = {"not broken down": step}
        rows += [{"panel": r["panel"], "configuration": label, "source": "measured", "part": p, "ms": ms}
                 for p, ms in measured.items()]
        predicted = _value(r, "predicted_step_time_ms")
        if predicted:
            known = {"compute": _value(r, "predicted_compute_ms"),
                     "exposed communication": _value(r, "predicted_exposed_comm_ms"),
                     "bubble": _value(r, "predicted_bubble") * predicted, "update": _value(r, "predicted_update_ms")}
            known["other"] = max(0.0, predicted - sum(known.values()))
            rows += [{"panel": r["panel"], "configuration": label, "source": "PREDICTED", "part": p, "ms": ms}
                     for p, ms in known.items() if ms > 0]
    return pd.DataFrame(rows)


def _figure(data: pd.DataFrame, ctx: Context) -> Path:
    names = sorted(data["panel"].unique())
    bars = data.groupby("panel")[["configuration", "source"]].apply(lambda g: len(g.drop_duplicates())).max()
    fig, axes = figures.panels(len(names), width=5.5, height=0.8 + 0.3 * int(bars))
    for ax, name in zip(axes, names, strict=True):
        panel = data[data["panel"] == name]
        bars = list(dict.fromkeys(f"{c} {s}" for c, s in zip(panel["configuration"], panel["source"], strict=True)))
        left = dict.fromkeys(bars, 0.0)
        for row in panel.to_dict("records"):
            bar = f"{row['configuration']} {row['source']}"
            ax.barh(bar, row["ms"], left=left[bar], color=PARTS[row["part"]], label=row["part"])
            left[bar] += row["ms"]
        ax.invert_yaxis()
        ax.set_xlabel("ms per step")
        ax.set_title(name, fontsize=10)
    figures.legend_outside(fig, axes, "part of the step")
    return figures.finish(fig, "Step time: measured and PREDICTED, by part", data, ctx.out / "breakdown.png",
                          flags=ctx.runs)


def section(ctx: Context) -> Section | None:
    if ctx.runs.empty:
        return None
    data = parts(ctx.runs)
    if data.empty or not ((data["source"] == "PREDICTED").any() or (data["part"] == "bubble").any()):
        return None  # nothing broken down: the throughput table already has every step time
    return Section("Where the step time goes", [
        "Each configuration's median step, measured (split where the run timed its parts: a pipeline's bubble and "
        "update) and PREDICTED (the predictor's compute, exposed communication, bubble and update; `other` is the "
        "rest of its step)."], [], [_figure(data, ctx)])
