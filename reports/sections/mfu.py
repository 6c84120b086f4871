"""MFU: model FLOPs utilisation, where some run knew its devices' peak FLOP/s."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports import figures
from reports.context import Context
from reports.render import Section


def figure(runs: pd.DataFrame, ctx: Context) -> Path:
    data = runs.dropna(subset=["mfu"])[["panel", "variant", "strategy", "devices", "mfu"]]
    names = sorted(data["panel"].unique())
    fig, axes = figures.panels(len(names))
    for ax, name in zip(axes, names, strict=True):
        panel = data[data["panel"] == name].sort_values(["devices", "variant"])
        labels = [f"{v} x{d}" for v, d in zip(panel["variant"], panel["devices"], strict=True)]
        ax.bar(labels, panel["mfu"] * 100, color=[figures.colour(s) for s in panel["strategy"]])
        ax.set_ylabel("MFU (% of peak FLOP/s)")
        ax.tick_params(axis="x", rotation=30)
        ax.set_title(name, fontsize=10)
    return figures.finish(fig, "Model FLOPs utilisation", data, ctx.out / "mfu.png", flags=ctx.runs)


def section(ctx: Context) -> Section | None:
    runs = ctx.runs
    if runs.empty:
        return None
    if runs["mfu"].isna().all():
        return Section("MFU", ["MFU is left out: no run knows its devices' peak FLOP/s (GPUs listed in "
                               "`bench/harness/devices.py`, or `bench run --peak-tflops`)."], appendix=True)
    return Section("MFU", ["Forward+backward FLOPs per sample (`torch.utils.flop_counter`) times samples/s, over "
                           "the devices' peak FLOP/s times the device count."], [], [figure(runs, ctx)])
