"""The decision first: per model, device count and batch, the configuration to use, why, how sure, how to run it."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from bench.harness.config import RunConfig
from reports.capacity import device_capacity
from reports.context import Context
from reports.render import Section
from reports.sections.what_if import recommendations
from strategies import REFERENCE

LEFT_OUT_OF_COMMANDS = {"out", "repeat", "profile", "save_checkpoint", "load_checkpoint", "timeout_s", "max_restarts"}
"""Config fields that say where a run wrote or which repeat it was, not what it ran."""


def command(config: dict[str, Any]) -> str:
    """The ``bench run`` that runs ``config`` again: every field that differs from RunConfig's default."""
    defaults = RunConfig().as_dict()
    always = ("strategy", "model", "preset", "devices", "batch_size")
    parts = ["python -m bench run"]
    for name, value in config.items():
        if name in LEFT_OUT_OF_COMMANDS or name not in defaults or value is None:
            continue
        if name not in always and value == defaults[name]:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def _memory(best: dict) -> str:
    tracked = best.get("mem_total_mib")
    shown = tracked if isinstance(tracked, float) and not math.isnan(tracked) else None
    what = "tracked"
    if shown is None and best.get("peak_mem_source") != "process_peak_rss":
        shown, what = best.get("peak_mem_mib_per_device"), "allocator peak"
    if shown is None:
        return "memory not tracked"
    capacity = device_capacity(best) if best.get("device_memory_bytes") else None
    if not capacity:
        return f"{_mib(shown)} MiB per device ({what})"
    fits = "fits" if shown * 2**20 <= capacity else "DOES NOT FIT"
    return f"{_mib(shown)} MiB per device ({what}), {fits} in {_mib(capacity / 2**20)}"


def _mib(value: float) -> str:
    """``12,053`` or ``0.25``: whole MiB where that keeps the figure, else three digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _checked(verified: str) -> str:
    return {"pass": "verified against single", "reference":
            "the reference the others are verified against"}.get(verified, verified)


def _sure(fastest: str) -> str:
    if fastest.startswith("tie"):
        return "a tie: their intervals overlap, so any of them"
    if fastest.startswith("not ranked") or "only one measured" in fastest:
        return fastest.split(": ", 1)[-1] if fastest.startswith("not ranked") else "the only one measured"
    return "a winner: its interval clears every other's"


def verdict_lines(ctx: Context) -> list[str]:
    """One line per model, device count and global batch."""
    lines = []
    runs = ctx.runs
    for row in ctx.leaders.to_dict("records") if not ctx.leaders.empty else []:
        head = f"**{row['panel']} on {row['devices']} device(s), batch {row['global_batch']}**"
        winners = list(row["winners"])
        if not winners:
            lines.append(f"{head}: none to use yet ({row['fastest']}).")
            continue
        best = runs[(runs["panel"] == row["panel"]) & (runs["devices"] == row["devices"])
                    & (runs["global_batch"] == row["global_batch"]) & (runs["variant"] == winners[0])].iloc[0]
        use = winners[0] if len(winners) == 1 else " or ".join(winners)
        per_device = best["samples_per_s"] / best["devices"]
        speed = f"{row['samples_per_s']} samples/s ({per_device:,.1f} per device)"
        # Only over single: where single did not run undisturbed, the baseline is another configuration.
        if row["devices"] > 1 and row.get("speedup") and best.get("baseline", REFERENCE) == REFERENCE:
            speed += f", {row['speedup']}x single"
        lines.append(f"{head}: use **{use}**. {speed}; {_memory(best.to_dict())}; {_checked(best['verified'])}; "
                     f"{_sure(row['fastest'])}. Run: `{command(_config(best))}`")
    return lines


def _config(row: pd.Series) -> dict[str, Any]:
    return dict(row["config"]) if isinstance(row.get("config"), dict) else {}


def section(ctx: Context) -> Section | None:
    lines = verdict_lines(ctx)
    predicted = recommendations(ctx)
    if not lines and predicted.empty:
        return None
    text = [counts(ctx), *lines]
    if ctx.emulated:
        text.append(emulation_sentence(ctx))
    for rec in predicted.to_dict("records"):
        text.append(f"PREDICTED, {rec['model']} on {rec['devices']} x {rec['hardware']}: **{rec['use']}**, "
                    f"{rec['predicted samples/s']:,.0f} samples/s (predicted); see Predicted cluster.")
    checks = ctx.results.predictions.get("published check", pd.Series(dtype=object)).dropna().unique()
    if not predicted.empty and len(checks):
        text.append(f"The cluster predictor against published GPU results: {'; '.join(checks)}.")
    return Section("Verdict", text)


def counts(ctx: Context) -> str:
    """Configurations (repeats combined) and the runs that made them, and what gave no figures."""
    runs, failures = ctx.results.runs, ctx.results.failures
    configurations = runs["config_key"].nunique() if not runs.empty else 0
    text = f"{configurations} configuration(s) measured in {len(runs)} run(s)"
    if not failures.empty:
        text += "".join(f", {n} {status}" for status, n in sorted(failures["status"].value_counts().items()))
        text += " (Appendix: Skipped, failed)"
    return text + "."


def emulation_sentence(ctx: Context) -> str:
    """What emulated runs can and cannot show, once."""
    runs = ctx.runs
    cores = max((r.get("env") or {}).get("cpu_cores") or 0 for r in ctx.results.records) or "the"
    most = int(runs["processes"].max()) if "processes" in runs and not runs.empty else 2
    return (f"EMULATED: up to {most} processes shared this machine's {cores} CPU cores, so the multi-device rows "
            "show that each strategy trains the same model as single and what its communication costs here, not "
            "how it would speed up on GPUs; " + (
                "for GPUs read Predicted cluster (PREDICTED)." if not ctx.results.predictions.empty else
                "for GPUs, `bench predict --hardware h200 ...` adds a PREDICTED cluster to this report."))
