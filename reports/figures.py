"""Seaborn figures of a sweep. Each function writes one PNG and returns its path, or None without data."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: reports are made on headless machines

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

EMULATED_NOTE = "EMULATED: several devices shared one CPU; this is not GPU scaling"
OVERSUBSCRIBED_NOTE = "OVERSUBSCRIBED: more processes than CPU cores"


def warning_for(runs: pd.DataFrame) -> str:
    """The mark every figure and table built from emulated or oversubscribed devices carries."""
    notes = []
    if "emulated" in runs and runs["emulated"].any():
        notes.append(EMULATED_NOTE)
    if "oversubscribed" in runs and runs["oversubscribed"].any():
        notes.append(OVERSUBSCRIBED_NOTE)
    return "; ".join(notes)


def _finish(fig: plt.Figure, title: str, runs: pd.DataFrame, path: Path) -> Path:
    """Titles and saves the figure, with its data beside it as CSV (same name, ``.csv``)."""
    runs.to_csv(path.with_suffix(".csv"), index=False)
    # Title and warning sit above the axes at fixed offsets in points, whatever the figure's height.
    warning = warning_for(runs)
    above = offset_copy(fig.transFigure, fig=fig, y=22 if warning else 6, units="points")
    fig.text(0.5, 1.0, title, ha="center", va="bottom", fontsize=12, transform=above)
    if warning:
        note = offset_copy(fig.transFigure, fig=fig, y=6, units="points")
        fig.text(0.5, 1.0, warning, ha="center", va="bottom", color="firebrick", fontsize=10, weight="bold",
                 transform=note)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _log2_axes(grid: sns.FacetGrid) -> None:
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)


def throughput(runs: pd.DataFrame, baseline: pd.DataFrame, out: Path) -> Path | None:
    """Samples/s against devices, one panel per model, with a dashed ideal-linear line from ``single``."""
    if runs.empty:
        return None
    grid = sns.FacetGrid(runs, col="panel", hue="variant", sharey=False, height=3.6, aspect=1.1)
    grid.map_dataframe(sns.lineplot, x="devices", y="samples_per_s", marker="o", errorbar=None)

    colours = dict(zip(grid.hue_names, sns.color_palette(n_colors=len(grid.hue_names)), strict=True))
    xs = sorted(runs["devices"].unique())
    for ax, panel_name in zip(grid.axes.flat, grid.col_names, strict=True):
        panel = runs[runs["panel"] == panel_name]
        for variant_name, part in panel.groupby("variant"):
            ax.errorbar(part["devices"], part["samples_per_s"],
                        yerr=[part["samples_per_s"] - part["samples_per_s_low"],
                              part["samples_per_s_high"] - part["samples_per_s"]],
                        fmt="none", ecolor=colours[variant_name], capsize=3)
        base = baseline[baseline["panel"] == panel_name].sort_values("global_batch")
        if not base.empty:
            one = float(base["samples_per_s"].iloc[0])
            ax.plot(xs, [one * x for x in xs], linestyle="--", color="grey", label="ideal linear")
    _log2_axes(grid)
    grid.set_titles("{col_name}")
    grid.set_axis_labels("devices", "samples/s")
    grid.add_legend(title="strategy (dashed: ideal linear from single)")
    return _finish(grid.figure, "Throughput vs devices (error bars: 95% interval over repeats; one run: IQR)", runs,
                   out / "throughput.png")


def scaling(runs: pd.DataFrame, out: Path) -> Path | None:
    """Speed-up over ``single`` and scaling efficiency (speed-up / devices)."""
    data = runs.dropna(subset=["speedup"])
    if data.empty:
        return None
    long = data.melt(id_vars=["panel", "variant", "devices"], value_vars=["speedup", "efficiency"],
                     var_name="figure", value_name="value")
    grid = sns.FacetGrid(long, row="figure", col="panel", hue="variant", sharey="row", height=3, aspect=1.2)
    grid.map_dataframe(sns.lineplot, x="devices", y="value", marker="o", errorbar=None)
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
    for ax in grid.axes[1]:
        ax.axhline(1.0, linestyle="--", color="grey")
    grid.set_titles("{row_name} | {col_name}")
    grid.add_legend(title="strategy")
    return _finish(grid.figure, "Speed-up over single and scaling efficiency", data,
                   out / "scaling.png")


def memory(runs: pd.DataFrame, out: Path) -> Path | None:
    """Peak memory per device for each strategy and device count, one panel per model."""
    if runs.empty:
        return None
    sources = ", ".join(sorted(runs["peak_mem_source"].unique()))
    grid = sns.catplot(data=runs, x="devices", y="peak_mem_mib_per_device", hue="variant", col="panel", kind="bar",
                       sharey=False, height=3.4, errorbar=None)
    grid.set_titles("{col_name}")
    grid.set_axis_labels("devices", "peak memory per device (MiB)")
    return _finish(grid.figure, f"Peak memory per device (measured as {sources})", runs,
                   out / "memory.png")


def throughput_vs_memory(runs: pd.DataFrame, out: Path) -> Path | None:
    """Where each strategy sits between speed and memory: up and to the left is better."""
    if runs.empty:
        return None
    grid = sns.relplot(data=runs, x="peak_mem_mib_per_device", y="samples_per_s", hue="variant", style="devices",
                       col="panel", s=80, height=3.4, facet_kws={"sharex": False, "sharey": False})
    grid.set_titles("{col_name}")
    grid.set_axis_labels("peak memory per device (MiB)", "samples/s")
    return _finish(grid.figure, "Throughput vs memory", runs, out / "throughput_vs_memory.png")


def mfu(runs: pd.DataFrame, out: Path) -> Path | None:
    """Model FLOPs utilisation per strategy and device count, one panel per model; None where no run
    knew its device's peak FLOP/s (every CPU run, and GPUs missing from bench/devices.py)."""
    data = runs.dropna(subset=["mfu"])
    if data.empty:
        return None
    grid = sns.catplot(data=data, x="devices", y="mfu", hue="variant", col="panel", kind="bar", sharey=False,
                       height=3.4, errorbar=None)
    grid.set_titles("{col_name}")
    grid.set_axis_labels("devices", "MFU (achieved / peak FLOP/s)")
    return _finish(grid.figure, "Model FLOPs utilisation", data, out / "mfu.png")


def data_parallel_family(runs: pd.DataFrame, out: Path) -> Path | None:
    """dp, ddp, zero1 and fsdp's two modes at equal device counts: throughput, and memory per device."""
    data = runs[runs["strategy"].isin(["dp", "ddp", "zero1", "fsdp"])]
    if data["strategy"].nunique() < 2:
        return None
    long = data.melt(id_vars=["panel", "devices", "variant"], value_vars=["samples_per_s", "mem_total_mib"],
                     var_name="figure", value_name="value")
    long["figure"] = long["figure"].map({"samples_per_s": "samples/s", "mem_total_mib": "tracked MiB per device"})
    grid = sns.catplot(data=long, x="devices", y="value", hue="variant", col="panel", row="figure", kind="bar",
                       sharey=False, height=3.0, errorbar=None)
    grid.set_titles("{col_name}: {row_name}")
    return _finish(grid.figure, "Data-parallel family: throughput and memory", data, out / "data_parallel.png")


def bubbles(runs: pd.DataFrame, out: Path) -> Path | None:
    """Measured pipeline bubble against the schedule's theoretical one, across micro-batch counts."""
    data = runs.dropna(subset=["bubble_measured"])
    if data.empty:
        return None
    # One line per strategy and schedule (mp's wavefront and pp's GPipe share the name "gpipe" but not a bubble).
    data = data.assign(pipeline=data["strategy"] + " " + data["schedule"].fillna("").astype(str))
    long = data.melt(
        id_vars=["panel", "pipeline", "microbatches", "devices"],
        value_vars=["bubble_measured", "bubble_theoretical"],
        var_name="bubble",
        value_name="fraction",
    )
    grid = sns.relplot(data=long, x="microbatches", y="fraction", hue="pipeline", style="bubble", col="panel",
                       row="devices", kind="line", marker="o", errorbar=None, height=3, aspect=1.2)
    grid.set_titles("{col_name}, {row_name} devices")
    return _finish(grid.figure, "Pipeline bubble: measured vs theoretical", data,
                   out / "bubbles.png")


def timeline(events: list[dict[str, object]], title: str, run: pd.DataFrame, out: Path,
             name: str = "pipeline_timeline") -> Path | None:
    """Gantt chart of one pipeline step: each rank's forward and backward per micro-batch; gaps are idle."""
    if not events:
        return None
    ranks = sorted({int(e["rank"]) for e in events})
    fig, ax = plt.subplots(figsize=(11, 0.8 + 0.6 * len(ranks)))
    # Span kinds of strategies/timing.py: forward, backward, and a split backward's input and weight halves.
    names = {"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weight)"}
    colours = {"F": "tab:blue", "B": "tab:orange", "I": "tab:red", "W": "tab:green"}
    kinds = [k for k in names if any(e["kind"] == k for e in events)]
    for e in events:
        start, end = float(e["start_ms"]), float(e["end_ms"])
        ax.barh(int(e["rank"]), end - start, left=start, color=colours.get(str(e["kind"]), "tab:grey"),
                edgecolor="white", height=0.7)
        ax.text((start + end) / 2, int(e["rank"]), str(e.get("microbatch", "")), ha="center", va="center",
                fontsize=7, color="white")
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step started")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds]
    ax.legend(handles, [names[k] for k in kinds], loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return _finish(fig, title, run, out / f"{name}.png")
