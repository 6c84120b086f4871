"""Pipelines: the bubble each schedule leaves, measured against its theory, and one step's timeline."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from reports import figures
from reports.context import Context
from reports.render import Section
from reports.scaling import left_out
from reports.spans import INPUT_AWAITED, INPUT_FIRST, OWN_INPUT

TEXT = (
    "Bubble: the share of a step a stage sits idle (waiting, transfers, Python). Theoretical: the schedule's own "
    "action table replayed with equal stages, a backward twice a forward and free transfers ((p-1)/(m+p-1) for "
    "GPipe and 1F1B). `update` is the optimizer's own share of the step, not idle. The timeline is one step of the "
    "last pipeline run; where the run carried its PREDICTED timeline, it is drawn below on the same time axis. "
    "`start_*_ms`: a rank's median wait to start an action whose input was sent before the rank came free, sent "
    "after, or its own (docs/report.md).")
KINDS = {"F": ("forward", "tab:blue"), "B": ("backward", "tab:orange"), "I": ("backward (input)", "tab:red"),
         "W": ("backward (weight)", "tab:green")}


def bubble_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per pipeline configuration: theoretical and measured bubble and the update's share, medians over repeats."""
    data = runs.dropna(subset=["bubble_measured"]) if "bubble_measured" in runs else pd.DataFrame()
    if data.empty:
        return data
    data = data[~left_out(data)] if not left_out(data).all() else data
    keys = ["panel", "strategy", "schedule", "devices", "stages_per_rank", "microbatches"]
    delays = [name for name in (INPUT_FIRST, INPUT_AWAITED, OWN_INPUT) if name in data and data[name].notna().any()]
    table = data.groupby(keys, dropna=False, sort=True)[
        ["bubble_theoretical", "bubble_measured", "update_fraction", *delays]].median().reset_index()
    return table.rename(columns={"stages_per_rank": "v", "microbatches": "m"}).round(3)


def _bubbles(table: pd.DataFrame, ctx: Context) -> Path:
    """Lines over micro-batch counts where there are several; bars where each pipeline ran one count."""
    data = table.assign(pipeline=table["strategy"] + " " + table["schedule"].fillna("").astype(str)
                        + " x" + table["devices"].astype(str))
    fig, axes = figures.panels(1, width=6.0)
    ax = axes[0]
    if data["m"].nunique() > 1:
        for name, part in data.groupby("pipeline"):
            part = part.sort_values("m")
            tint = figures.colour(name.split(" ")[0])
            ax.plot(part["m"], part["bubble_measured"], marker="o", color=tint, label=f"{name} measured")
            ax.plot(part["m"], part["bubble_theoretical"], marker="x", linestyle=":", color=tint,
                    label=f"{name} theoretical")
        ax.set_xticks(sorted(data["m"].unique()))
        ax.set_xlabel("micro-batches m")
    else:
        labels = [f"{p} (m={m})" for p, m in zip(data["pipeline"], data["m"], strict=True)]
        xs = range(len(labels))
        tints = [figures.colour(p.split(" ")[0]) for p in data["pipeline"]]
        ax.bar([x - 0.2 for x in xs], data["bubble_measured"], width=0.4, color=tints, label="measured")
        ax.bar([x + 0.2 for x in xs], data["bubble_theoretical"], width=0.4, color=tints, alpha=0.45,
               hatch="//", label="theoretical")
        ax.set_xticks(list(xs), labels, rotation=15, ha="right")
    ax.set_ylabel("bubble (share of the step idle)")
    ax.set_ylim(0, max(1e-3, float(data[["bubble_measured", "bubble_theoretical"]].max().max())) * 1.15)
    figures.legend_outside(fig, axes, "")
    return figures.finish(fig, "Pipeline bubble: measured vs theoretical", data, ctx.out / "bubbles.png",
                          flags=ctx.runs)


def last_timeline(ctx: Context) -> tuple[dict, list[dict], list[dict]] | None:
    """The last pipeline run that kept its events: the record, its measured and its predicted spans."""
    for record in reversed(ctx.results.records):
        events = (record.get("strategy_fields") or {}).get("timeline")
        if record.get("status") == "ok" and events and record.get("kind", "run") == "run":
            return record, events, (record.get("prediction") or {}).get("predicted_timeline") or []
    return None


def _timeline(ctx: Context) -> Path | None:
    found = last_timeline(ctx)
    if found is None:
        return None
    record, measured, predicted = found
    rows = [{"source": source, **span} for source, spans in (("measured", measured), ("PREDICTED", predicted))
            for span in spans]
    data = pd.DataFrame(rows)
    shown = [s for s in ("measured", "PREDICTED") if s in set(data["source"])]
    ranks = sorted({int(r) for r in data["rank"]})
    fig, axes = plt.subplots(len(shown), 1, sharex=True, squeeze=False,
                             figsize=(11, 0.9 + 0.6 * len(ranks) * len(shown)))
    for ax, source in zip(axes[:, 0], shown, strict=True):
        for e in data[data["source"] == source].to_dict("records"):
            start, end = float(e["start_ms"]), float(e["end_ms"])
            ax.barh(int(e["rank"]), end - start, left=start, color=KINDS.get(str(e["kind"]), ("", "tab:grey"))[1],
                    edgecolor="white", height=0.7)
            ax.text((start + end) / 2, int(e["rank"]), str(e.get("microbatch", "")), ha="center", va="center",
                    fontsize=7, color="white")
        ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
        ax.invert_yaxis()
        ax.set_title(source, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("ms since the step started (one axis for both)")
    kinds = [k for k in KINDS if k in set(data["kind"])]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KINDS[k][1]) for k in kinds]
    axes[0, 0].legend(handles, [KINDS[k][0] for k in kinds], loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    config = record.get("config") or {}
    title = (f"One step of {record['strategy']} ({config.get('schedule')}, m={config.get('microbatches')}) on "
             f"{record['device_count']} ranks, {record['model']}")
    flags = pd.DataFrame([{"emulated": record["emulated"], "oversubscribed": record.get("oversubscribed")}])
    return figures.finish(fig, title, data, ctx.out / "pipeline_timeline.png", flags=flags)


def section(ctx: Context) -> Section | None:
    table = bubble_table(ctx.runs) if not ctx.runs.empty else pd.DataFrame()
    timeline = _timeline(ctx)
    if table.empty and timeline is None:
        return None
    figs = [f for f in ((_bubbles(table, ctx) if not table.empty else None), timeline) if f is not None]
    return Section("Pipelines", [TEXT], [table] if not table.empty else [], figs)
