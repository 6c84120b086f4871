"""The numbers behind the figures: scaling against ``single``, verification status, the summary."""

from __future__ import annotations

import math

import pandas as pd

VERIFIED, NOT_VERIFIED, WRONG = "pass", "not verified", "FAIL"


def with_scaling(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Adds ``speedup`` and ``efficiency`` against ``single`` on one device of the same model, preset
    and scaling mode; also returns those baseline rows (the fastest, where several exist)."""
    if runs.empty:
        return runs, runs
    keys = ["panel", "scaling"]
    single = runs[(runs["strategy"] == "single") & (runs["devices"] == 1)]
    baseline = single.sort_values("samples_per_s").groupby(keys, as_index=False).last()
    base = baseline[[*keys, "samples_per_s"]].rename(columns={"samples_per_s": "baseline_samples_per_s"})
    merged = runs.merge(base, on=keys, how="left")
    merged["speedup"] = merged["samples_per_s"] / merged["baseline_samples_per_s"]
    merged["efficiency"] = merged["speedup"] / merged["devices"]
    return merged.drop(columns="baseline_samples_per_s"), baseline


def with_verification(runs: pd.DataFrame, verify: pd.DataFrame) -> pd.DataFrame:
    """Adds ``verified``: pass / FAIL from ``bench verify`` for the strategy and model, else not verified.

    ``single`` is the reference and passes by definition.
    """
    if runs.empty:
        return runs
    status = {}
    if not verify.empty:
        for row in verify.itertuples():
            if row.passed is None or (isinstance(row.passed, float) and math.isnan(row.passed)):
                continue  # skipped: no verdict
            key = (row.strategy, row.model)
            passed = bool(row.passed) and status.get(key, VERIFIED) == VERIFIED
            status[key] = VERIFIED if passed else WRONG
    verified = [
        VERIFIED if s == "single" else status.get((s, m), NOT_VERIFIED)
        for s, m in zip(runs["strategy"], runs["model"], strict=True)
    ]
    return runs.assign(verified=verified)


def fastest(runs: pd.DataFrame) -> pd.DataFrame:
    """For each model and device count, the fastest strategy that was not shown to be wrong."""
    if runs.empty:
        return runs
    trusted = runs[runs["verified"] != WRONG]
    best = trusted.sort_values("samples_per_s").groupby(["panel", "devices"], as_index=False).last()
    return best[["panel", "devices", "variant", "samples_per_s", "speedup", "efficiency", "verified", "emulated"]]


def results_table(runs: pd.DataFrame) -> pd.DataFrame:
    columns = ["panel", "devices", "variant", "scaling", "global_batch", "samples_per_s", "step_time_ms",
               "step_time_iqr_ms", "speedup", "efficiency", "peak_mem_mib_per_device", "mfu", "verified", "emulated",
               "oversubscribed"]
    present = [c for c in columns if c in runs.columns]
    return runs.sort_values(["panel", "devices", "samples_per_s"], ascending=[True, True, False])[present]


def hybrid_vs_parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Each hybrid run's efficiency against the product of its parts', the runs its record names
    (``parts``: ``ddp`` on D devices and ``pp`` on P devices at the hybrid's per-device batch, pp with
    its schedule and micro-batches). 1.0: dp and pp compose perfectly; NaN: a part was not measured."""
    if runs.empty or "hybrid" not in set(runs["strategy"]):
        return pd.DataFrame()
    rows = []
    for h in runs[runs["strategy"] == "hybrid"].itertuples():
        parts = h.parts if isinstance(h.parts, dict) else {}
        ddp_eff, pp_eff = (_part_efficiency(runs, h.panel, parts.get(name)) for name in ("ddp", "pp"))
        rows.append({"panel": h.panel, "variant": h.variant, "dp": h.dp, "pp": h.pp, "efficiency": h.efficiency,
                     "ddp_efficiency": ddp_eff, "pp_efficiency": pp_eff,
                     "vs_product_of_parts": h.efficiency / (ddp_eff * pp_eff)})
    return pd.DataFrame(rows)


PART_COLUMNS = {"batch_size": "global_batch"}
"""Record keys of a hybrid's ``parts`` whose report column has another name."""


def _part_efficiency(runs: pd.DataFrame, panel: str, part: dict | None) -> float:
    """The best efficiency among the runs of ``panel`` that match every key of ``part``."""
    if not part:
        return float("nan")
    match = runs["panel"] == panel
    for key, value in part.items():
        match &= runs[PART_COLUMNS.get(key, key)] == value
    return runs.loc[match, "efficiency"].max() if match.any() else float("nan")
