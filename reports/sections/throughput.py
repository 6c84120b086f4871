"""Throughput and scaling: every configuration's samples/s, per device, its speed-up over single, and two figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.harness.stats import with_interval
from reports import figures
from reports.capacity import preset_sizes
from reports.context import Context
from reports.render import Section
from strategies import REFERENCE
from strategies.mesh import DP, PP, TP

TEXT = (
    "One row per configuration: the median over its repeats (fresh processes, run round by round), in brackets "
    "the 95% bootstrap interval of that median; one repeat has none. Speed-up is over `single` at the same "
    "global batch, the median of the ratios measured side by side in each round, which cancels the drift "
    "between rounds (so it can order rows differently from samples/s); read a difference only where intervals "
    "do not overlap. Tracked MiB: the largest device's tracked peak; comm MiB/step: the floating-point payload "
    "each rank handed to gloo or NCCL in a warm-up step (torch.profiler's record of the backend's calls, "
    "receives left out, mean over ranks).")


def mesh(row: dict) -> str:
    """The degrees as ``dp x pp x tp``, from what the run recorded (its stages, tp, hybrid's mesh)."""
    fields = row.get("fields") or {}
    pp = int(fields.get(PP) or fields.get("stages") or 1)
    tp = int(fields.get(TP) or 1)
    dp = int(fields.get(DP) or max(1, int(row["devices"]) // (pp * tp)))
    return f"{dp} x {pp} x {tp}"


def parameters(model: str, preset: str) -> float:
    """The model's parameter count (meta device), NaN for a model the suite cannot build."""
    try:
        return float(preset_sizes(model, preset)[0])
    except (KeyError, ValueError, TypeError):
        return float("nan")


def table(runs: pd.DataFrame) -> pd.DataFrame:
    data = runs.sort_values(["panel", "devices", "samples_per_s"], ascending=[True, True, False])
    rows = []
    for r in data.to_dict("records"):
        rows.append({
            "panel": r["panel"], "devices": r["devices"], "variant": r["variant"], "dp x pp x tp": mesh(r),
            "global_batch": r["global_batch"], "parameters (M)": parameters(r["model"], r["preset"]) / 1e6,
            "samples/s": with_interval(r["samples_per_s"], r["samples_per_s_low"], r["samples_per_s_high"], 1),
            "samples/s per device": r["samples_per_s"] / r["devices"],
            "speed-up": with_interval(r["speedup"], r["speedup_low"], r["speedup_high"]),
            "efficiency": r["efficiency"], "step ms": r["step_time_ms"],
            "tracked MiB": r.get("mem_total_mib", float("nan")),
            "comm MiB/step": r.get("comm_mib_per_step", float("nan")), "repeats": r["repeats"],
            "disturbed": r["disturbed_runs"], "verified": r["verified"], "emulated": r["emulated"]})
    frame = pd.DataFrame(rows)
    if "baseline" in runs and (runs["baseline"] != REFERENCE).any():
        frame["baseline"] = list(data["baseline"])
    return frame


def _lines(data: pd.DataFrame, y: str, ylabel: str, title: str, out_name: str, ctx: Context,
           ideal: pd.DataFrame | None = None, one: bool = False) -> Path:
    """One panel per model: a line per variant in its strategy's colour, error bars where there are intervals."""
    names = sorted(data["panel"].unique())
    variants = figures.in_order(data["variant"].unique())
    fig, axes = figures.panels(len(names))
    for ax, name in zip(axes, names, strict=True):
        panel = data[data["panel"] == name]
        log = panel["devices"].nunique() > 2
        for variant, part in panel.groupby("variant"):
            part = part.sort_values("devices")
            errors = [(part[y] - part[f"{y}_low"]).fillna(0), (part[f"{y}_high"] - part[y]).fillna(0)]
            # Dodged a little sideways, so the bars of configurations at one device count do not hide each other.
            shift = (variants.index(variant) - (len(variants) - 1) / 2) * 0.025
            xs = part["devices"] * (2 ** shift) if log else part["devices"] + shift * 2
            ax.errorbar(xs, part[y], yerr=errors, label=variant, capsize=3,
                        color=figures.colour(figures.strategy_of(variant)),
                        marker=figures.marker(variant, variants))
        if ideal is not None and not ideal[ideal["panel"] == name].empty:
            base = float(ideal[ideal["panel"] == name].sort_values("global_batch")["samples_per_s"].iloc[0])
            xs = sorted(panel["devices"].unique())
            ax.plot(xs, [base * x for x in xs], label="ideal linear from single", **figures.IDEAL)
        if one:
            ax.axhline(1.0, label="single (1.0)", **figures.IDEAL)
        figures.device_axis(ax, list(panel["devices"]))
        ax.set_ylabel(ylabel)
        ax.set_title(name, fontsize=10)
    figures.legend_outside(fig, axes, "strategy")
    return figures.finish(fig, title, data, ctx.out / out_name, flags=ctx.runs)


def section(ctx: Context) -> Section | None:
    runs = ctx.runs
    if runs.empty:
        return None
    base = ["panel", "variant", "strategy", "devices", "global_batch"]
    speed = runs[[*base, "samples_per_s", "samples_per_s_low", "samples_per_s_high"]]
    label = "samples/s (bars: 95% interval over repeats)"
    paths = [_lines(speed, "samples_per_s", label, "Throughput vs devices", "throughput.png", ctx, ctx.baseline)]
    scaled = runs.dropna(subset=["speedup"])[[*base, "speedup", "speedup_low", "speedup_high", "efficiency"]]
    if not scaled.empty and (scaled["devices"] > 1).any():
        paths.append(_lines(scaled, "speedup", "speed-up over single (x)", "Speed-up over single", "scaling.png",
                            ctx, one=True))
    return Section("Throughput and scaling", [TEXT], [table(runs)], [p for p in paths if p is not None])




