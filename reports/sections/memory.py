"""Memory: what each configuration's largest device held, by kind, as torch's memory tracker sorts it.

The figures plot tracked bytes (or a GPU allocator's peak), never a CPU process's RSS: that is mostly the
runtime (about 1 GB), the same for every strategy, and it hid that ZeRO-3 holds the least."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports import figures
from reports.capacity import largest_presets
from reports.context import Context
from reports.render import Section
from reports.scaling import left_out

KINDS = ("parameters", "gathered_parameters", "gradients", "optimizer_state", "activations", "temporaries",
         "buffers")


def tracked(runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration with tracked memory: MiB of each kind and the total, largest device."""
    if "mem_total_mib" not in runs:
        return pd.DataFrame()
    data = runs.dropna(subset=["mem_total_mib"]).sort_values(["panel", "devices", "variant"])
    columns = ["panel", "devices", "variant", "strategy", "samples_per_s", *(f"mem_{k}_mib" for k in KINDS),
               "mem_total_mib"]
    return data[columns].reset_index(drop=True)


def frontier(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model, device count and batch: each tracked budget that buys speed, and the fastest that fits it."""
    data = runs.dropna(subset=["mem_total_mib"]) if "mem_total_mib" in runs else pd.DataFrame()
    if data.empty:
        return data
    data = data[~left_out(data)] if not left_out(data).all() else data
    rows = []
    for (panel, devices, batch), group in data.groupby(["panel", "devices", "global_batch"], sort=True):
        best = 0.0
        for row in group.sort_values(["mem_total_mib", "samples_per_s"], ascending=[True, False]).itertuples():
            if row.samples_per_s > best:
                best = row.samples_per_s
                rows.append({"panel": panel, "devices": devices, "global_batch": batch,
                             "budget MiB per device": round(row.mem_total_mib, 3),
                             "fastest that fits": row.variant, "samples/s": round(row.samples_per_s, 1)})
    return pd.DataFrame(rows)


def _by_kind_figure(data: pd.DataFrame, ctx: Context) -> Path:
    names = sorted(data["panel"].unique())
    fig, axes = figures.panels(len(names), width=5.0, height=3.6)
    shades = dict(zip(KINDS, ("#4c72b0", "#8172b3", "#dd8452", "#c44e52", "#55a868", "#937860", "#da8bc3"),
                      strict=True))
    for ax, name in zip(axes, names, strict=True):
        panel = data[data["panel"] == name]
        labels = [f"{v} x{d}" for v, d in zip(panel["variant"], panel["devices"], strict=True)]
        bottom = [0.0] * len(panel)
        for kind in KINDS:
            values = list(panel[f"mem_{kind}_mib"].fillna(0))
            if any(values):
                ax.barh(labels, values, left=bottom, color=shades[kind], label=kind.replace("_", " "))
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xlabel("tracked MiB on the largest device")
        ax.set_title(name, fontsize=10)
        ax.invert_yaxis()
    figures.legend_outside(fig, axes, "kind")
    return figures.finish(fig, "Memory per device by kind (tracked)", data, ctx.out / "memory.png", flags=ctx.runs)


def _speed_figure(data: pd.DataFrame, ctx: Context) -> Path:
    names = sorted(data["panel"].unique())
    variants = sorted(data["variant"].unique())
    fig, axes = figures.panels(len(names))
    for ax, name in zip(axes, names, strict=True):
        for row in data[data["panel"] == name].to_dict("records"):
            ax.scatter(row["mem_total_mib"], row["samples_per_s"], s=60, label=row["variant"],
                       color=figures.colour(row["strategy"]), marker=figures.marker(row["variant"], variants))
        ax.set_xlabel("tracked MiB per device")
        ax.set_ylabel("samples/s")
        ax.set_title(f"{name} (up and left is better)", fontsize=10)
    figures.legend_outside(fig, axes, "strategy")
    return figures.finish(fig, "Throughput vs tracked memory", data[["panel", "variant", "devices",
                                                                       "samples_per_s", "mem_total_mib"]],
                          ctx.out / "throughput_vs_memory.png", flags=ctx.runs)


def section(ctx: Context) -> Section | None:
    data = tracked(ctx.runs) if not ctx.runs.empty else pd.DataFrame()
    if data.empty:
        return None
    text = ["MiB that the largest device held over its first and second warm-up steps (each kind the larger; the "
            "second holds the optimizer's state throughout), as torch's MemTracker (FSDPMemTracker "
            "for fsdp) sorts its tensors, each kind at its own peak, the total at the step's peak. The pipelines' "
            "step is one the tracker cannot follow, so they are absent. Then, per device count, each budget that "
            "buys speed and the fastest configuration within it."]
    table = data.drop(columns=["strategy", "samples_per_s"]).rename(
        columns={c: c.removeprefix("mem_").removesuffix("_mib").replace("_", " ") for c in data.columns})
    tables = [table.round(2), frontier(ctx.runs)]
    capacity = largest_presets(ctx.runs)
    if not capacity.empty:
        text.append("Last, the largest preset each configuration would fit (EXTRAPOLATED from its tracked bytes "
                    "per parameter and per saved activation, not measured).")
        tables.append(capacity)
    figs = [_by_kind_figure(data, ctx), _speed_figure(data, ctx)]
    return Section("Memory", text, [t for t in tables if not t.empty], figs)
