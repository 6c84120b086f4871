"""Repeats into configurations (each under a label of its own), and each configuration's speed-up over its baseline.

The baseline is ``single`` at the same model, size, global batch and precision. Where no ``single``
run holds that batch (it ran out of memory, or failed), it is the fastest configuration at the
smallest device count that ran it, and the row says so: its speed-up is over that configuration,
its efficiency speed-up / (devices / the baseline's devices).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

import pandas as pd

from bench.harness.stats import bootstrap_interval
from strategies import REFERENCE

BASELINE_KEYS = ["panel", "global_batch", "precision", "accelerator"]
"""What a run shares with the run it is compared with: model and size, global batch, arithmetic."""
SINGLE = REFERENCE


SAME_LABEL = ["panel", "devices", "global_batch", "variant"]
"""Where two configurations would show as one: a table row or a figure's point is named by these."""


def distinct_variants(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs whose configurations share a panel, a device count, a batch and a variant label but differ in
    what the label leaves out (a pytest-benchmark case's warm-up beside a `bench run`'s, say) get what sets
    them apart in brackets, ``single [warmup=2]``: no table or figure shows two configurations under one name."""
    if runs.empty:
        return runs
    runs = runs.copy()
    for _, group in runs.groupby(SAME_LABEL, sort=False):
        keys = list(dict.fromkeys(group["config_key"]))
        if len(keys) < 2:
            continue
        configs = [json.loads(key) for key in keys]
        differing = sorted(k for k in set().union(*configs) if len({json.dumps(c.get(k)) for c in configs}) > 1)
        for key, config in zip(keys, configs, strict=True):
            rows = group.index[group["config_key"] == key]
            runs.loc[rows, "variant"] += " [" + ", ".join(f"{k}={config.get(k)}" for k in differing) + "]"
    return runs


def left_out(runs: pd.DataFrame) -> pd.Series:
    """Runs whose timings are not the strategy's alone: disturbed by other work, or profiled."""
    return runs["disturbed"] | runs["profiled"]


PER_RUN_MEDIANS = ("bubble_measured", "update_fraction", "predicted_step_time_ms", "predicted_compute_ms",
                   "predicted_exposed_comm_ms", "predicted_update_ms", "predicted_bubble", "actions_over_predicted")
"""Figures of each run that a configuration's row shows as the median over its repeats, as its step time: what it
measured, and what was predicted for it (each run's prediction is scaled by the canary timed just before it,
bench/predict/canary.py: the target sweep's first repeat of mp on the transformer was predicted for a moment 17%
slower, and against the repeats' median it read +32% where its runs read +15% to +17%)."""


def _median_memory(runs: pd.DataFrame) -> dict[str, float]:
    """The tracked memory of the repeat whose largest device's total is the median (the lower of two), each kind as
    that one run held it, and the range of the repeats' figures of each kind (``mem_<kind>_mib_low`` and
    ``_high``): FSDP's peak moves with when its collectives complete (ZeRO-3 on the small cnn at 4 ranks: 79.74,
    93.25, 93.25 MiB over three repeats)."""
    totals = runs["mem_total_mib"].dropna() if "mem_total_mib" in runs else pd.Series(dtype=float)
    if totals.empty:
        return {}
    middle = runs.loc[totals.index[list(totals).index(statistics.median_low(totals))]]
    names = [name for name in runs.columns if name.startswith("mem_") and name.endswith("_mib")]
    tracked = runs.loc[totals.index]
    # each kind's range too (its own repeats, not the total's): a prediction of one of FSDP's two moments is read
    # against the repeats that reached the other
    ranges = {**{f"{name}_low": tracked[name].min() for name in names},
              **{f"{name}_high": tracked[name].max() for name in names}}
    return {**ranges, **{name: middle[name] for name in names}}


def is_pair(interval: object) -> bool:
    """Whether a record's interval field holds its two bounds (older records and profiles carry none)."""
    return isinstance(interval, (list, tuple)) and len(interval) == 2


def combine(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration from its repeats: the median over the undisturbed ones (over all of them,
    marked, when every repeat was disturbed), and the bootstrap interval of that median."""
    if runs.empty:
        return runs
    rows = []
    for _, group in runs.groupby("config_key", sort=False):
        quiet = group[~left_out(group)]
        used = quiet if not quiet.empty else group
        row = used.iloc[0].to_dict()
        throughput = list(used["samples_per_s"])
        interval = bootstrap_interval(throughput)
        row.update(
            samples_per_s=statistics.median(throughput),
            step_time_ms=statistics.median(used["step_time_ms"]),
            step_time_ms_min=used["step_time_ms"].min(),
            step_time_ms_max=used["step_time_ms"].max(),
            repeats=len(used),
            disturbed_runs=int(left_out(group).sum()),
            all_disturbed=quiet.empty,
            peak_mem_mib_per_device=used["peak_mem_mib_per_device"].max(),
        )
        for name in PER_RUN_MEDIANS:  # not the first repeat's own
            values = used[name].dropna() if name in used else ()
            if len(values):
                row[name] = statistics.median(values)
        row.update(_median_memory(used))
        bubbles = used["bubble_measured"].dropna() if "bubble_measured" in used else pd.Series(dtype=float)
        if not bubbles.empty:  # the spread a predicted bubble is read against (the repeats' own)
            row["bubble_measured_low"], row["bubble_measured_high"] = bubbles.min(), bubbles.max()
        # One run has no interval: the unit of repetition is the run, and its own steps' spread is not one.
        row["samples_per_s_low"], row["samples_per_s_high"] = interval or (float("nan"), float("nan"))
        # Each run against the interval predicted for it (a sweep widens each to the errors measured before it).
        intervals = used.get("predicted_step_time_ms_interval", ())
        judged = [bounds[0] <= measured <= bounds[1]
                  for measured, bounds in zip(used["step_time_ms"], intervals, strict=True) if is_pair(bounds)]
        row["runs_inside_interval"], row["runs_with_interval"] = sum(judged), len(judged)
        if judged:  # the one shown: its last run's, predicted from the most earlier errors
            row["predicted_step_time_ms_interval"] = list(intervals)[-1]
        predicted = row.get("predicted_step_time_ms")
        if predicted is not None and predicted == predicted:  # not NaN
            # The error the report shows: against the median of the repeats, not the first repeat's own.
            row["prediction_error"] = predicted / row["step_time_ms"] - 1
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Baseline:
    """The configuration a row's speed-up is over."""

    config_key: str
    devices: int
    label: str
    """``single``, or which configuration stands in for it and why."""


def with_scaling(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The configurations (``combine``) with ``speedup`` over their baseline (module docstring), its
    interval, ``efficiency`` and ``baseline`` (the label); also returns the ``single`` baselines.

    The speed-up is the median over rounds of the ratio measured side by side in one round (a
    configuration's and its baseline's run with the same ``repeat``), with its bootstrap interval;
    without such pairs it is the ratio of the two medians, without an interval."""
    combined = combine(runs)
    if combined.empty:
        return combined, combined
    quiet = runs[~left_out(runs)]
    singles = combine(quiet[(quiet["strategy"] == SINGLE) & (quiet["devices"] == 1)])
    configurations = combine(quiet)
    baselines = [_baseline(row, configurations) for row in combined.to_dict("records")]
    speedups = [_speedup(row, base, quiet) for row, base in zip(combined.to_dict("records"), baselines, strict=True)]
    combined[["speedup", "speedup_low", "speedup_high"]] = pd.DataFrame(speedups, index=combined.index)
    base_devices = pd.Series([b.devices if b else float("nan") for b in baselines], index=combined.index)
    for column in ("", "_low", "_high"):
        combined[f"efficiency{column}"] = combined[f"speedup{column}"] / (combined["devices"] / base_devices)
    combined["baseline"] = [b.label if b else "none: no run at this batch to compare with" for b in baselines]
    return combined, singles


def _baseline(row: dict, configurations: pd.DataFrame) -> Baseline | None:
    """``single`` at the row's batch, else the fastest of the undisturbed ``configurations`` at the
    smallest device count that ran it."""
    if configurations.empty:
        return None
    same = configurations[(configurations[BASELINE_KEYS] == pd.Series({k: row[k] for k in BASELINE_KEYS})).all(axis=1)]
    single = same[(same["strategy"] == SINGLE) & (same["devices"] == 1)]
    if not single.empty:
        return Baseline(single.iloc[0]["config_key"], 1, SINGLE)
    if same.empty:
        return None
    smallest = same[same["devices"] == same["devices"].min()]
    best = smallest.sort_values("samples_per_s", ascending=False).iloc[0]
    return Baseline(best["config_key"], int(best["devices"]),
                    f"{best['variant']} on {best['devices']} device(s): no single run at this batch, so the "
                    "fastest at the smallest device count that ran it")


def _speedup(row: dict, base: Baseline | None, quiet: pd.DataFrame) -> tuple[float, float, float]:
    nan = float("nan")
    if base is None:
        return nan, nan, nan
    base_runs = quiet[quiet["config_key"] == base.config_key]
    mine = quiet[quiet["config_key"] == row["config_key"]]
    base_ms = base_runs.groupby("repeat")["step_time_ms"].median()
    ratios = [base_ms[r] / ms for r, ms in zip(mine["repeat"], mine["step_time_ms"], strict=True) if r in base_ms]
    if not ratios:
        return statistics.median(base_runs["step_time_ms"]) / row["step_time_ms"], nan, nan
    interval = bootstrap_interval(ratios) or (nan, nan)
    return statistics.median(ratios), *interval
