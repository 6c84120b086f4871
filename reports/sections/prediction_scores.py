"""Every other predicted figure scored against its measurement: memory by kind against torch's MemTracker on the
runs that record it, and each pipeline's bubble against the one its ranks measured."""

from __future__ import annotations

import pandas as pd

from reports.context import Context
from reports.render import Section

KINDS = ("parameters", "gradients", "optimizer_state", "activations", "gathered_parameters", "temporaries", "total")
"""The kinds a memory model may predict (each strategy's cost model), as the tracker names them; a configuration is
scored on those its prediction carries (FSDP's gathered parameters, DDP's buckets as temporaries)."""
RANGE_MARGIN = 0.01
"""How far outside the range of its repeats' tracked totals a predicted total may sit and still count as inside it."""
BUBBLE_TOLERANCE = 0.05
"""How far a predicted bubble may sit from the measured one (issue 29's target), as a share of the step."""
REPEATS, NEAR_A_REPEAT = "repeats' bubbles", f"within {BUBBLE_TOLERANCE} of a repeat"
"""The columns of the range of bubbles a configuration's repeats measured, and whether the predicted one lies within
the tolerance of it."""
NEAREST = "error against the nearest repeat"
"""The column suffix of each kind's error against the repeat whose figure of it lies nearest the prediction."""
ACTIONS = "actions measured / predicted"
"""The column of each pipeline's actions' measured over predicted durations (reports/spans.py)."""


def memory_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration that carries both: predicted against tracked MiB of each kind, on the largest device,
    and each kind's error (predicted / measured - 1; NaN where it predicts none of that kind or measured none)."""
    if runs.empty or "predicted_memory_by_kind" not in runs:
        return pd.DataFrame()
    rows = []
    for r in runs.to_dict("records"):
        predicted = r.get("predicted_memory_by_kind")
        measured_total = r.get("mem_total_mib")
        if not isinstance(predicted, dict) or measured_total is None or measured_total != measured_total:
            continue
        row: dict[str, object] = {"panel": r["panel"], "devices": r["devices"], "variant": r["variant"]}
        for kind in KINDS:
            measured = float(r.get(f"mem_{kind}_mib") or 0.0)
            if kind not in predicted:
                continue
            guess = float(predicted[kind]) / 2**20
            row[f"{kind} MiB (measured / predicted)"] = f"{measured:.3g} / {guess:.3g}"
            row[f"{kind} error"] = guess / measured - 1 if measured else float("nan")
            nearest = min(max(guess, r.get(f"mem_{kind}_mib_low", measured)), r.get(f"mem_{kind}_mib_high", measured))
            row[f"{kind} {NEAREST}"] = guess / nearest - 1 if nearest else float("nan")
        low, high = r.get("mem_total_mib_low", measured_total), r.get("mem_total_mib_high", measured_total)
        if "total" in predicted:
            row["repeats' totals MiB"] = f"{low:.3g}-{high:.3g}"
            total = predicted["total"] / 2**20
            row["total inside"] = bool(low * (1 - RANGE_MARGIN) <= total <= high * (1 + RANGE_MARGIN))
        rows.append(row)
    table = pd.DataFrame(rows)
    errors = [f"{kind} error" for kind in KINDS if f"{kind} error" in table]
    strings = [f"{kind} MiB (measured / predicted)" for kind in KINDS if f"{kind} error" in table]
    ranges = [c for c in ("repeats' totals MiB", "total inside") if c in table]
    nearest = [f"{kind} {NEAREST}" for kind in KINDS if f"{kind} error" in table]
    return table[["panel", "devices", "variant", *strings, *errors, *ranges, *nearest]] if rows else table


def nearest_summary(scores: pd.DataFrame) -> str:
    """Each kind's largest |error| against the repeat whose figure of that kind lies nearest its prediction (none
    where the prediction lies inside the range its repeats tracked)."""
    phrases = [f"{kind.replace('_', ' ')} {errors.max():.1%}" for kind in KINDS
               if f"{kind} {NEAREST}" in scores and not (errors := scores[f"{kind} {NEAREST}"].abs().dropna()).empty]
    if not phrases:
        return ""
    return (" Against the repeat nearest each prediction (a kind's figure moves from repeat to repeat where FSDP's "
            "collectives complete at other moments), the largest |error|: " + ", ".join(phrases) + ".")


def kind_summary(scores: pd.DataFrame) -> list[str]:
    """One phrase per kind scored: median and largest |error|, over how many configurations, and where the
    largest was."""
    phrases = []
    for kind in KINDS:
        column = f"{kind} error"
        if column not in scores:
            continue
        errors = scores[column].abs().dropna()
        if errors.empty:
            continue
        worst = scores.loc[errors.idxmax()]
        phrases.append(f"{kind.replace('_', ' ')} median {errors.median():.1%}, largest {errors.max():.1%} "
                       f"({worst['variant']} x{worst['devices']}, {worst['panel']}; {len(errors)} configurations)")
    return phrases


def _inside(scores: pd.DataFrame) -> str:
    """How many predicted totals sit inside the range their repeats tracked (FSDP's moves with its collectives)."""
    if "total inside" not in scores:
        return ""
    judged = scores["total inside"].dropna()
    return (f" The predicted total within {RANGE_MARGIN:.0%} of the range its repeats tracked: {int(judged.sum())} of "
            f"{len(judged)}.")


def bubble_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """Per pipelined configuration: the bubble its ranks measured, the predicted one, and whether they agree."""
    if runs.empty or "predicted_bubble" not in runs or "bubble_measured" not in runs:
        return pd.DataFrame()
    data = runs.dropna(subset=["predicted_bubble", "bubble_measured"])
    if data.empty:
        return pd.DataFrame()
    difference = data["predicted_bubble"] - data["bubble_measured"]
    table = pd.DataFrame({
        "panel": data["panel"], "devices": data["devices"], "variant": data["variant"],
        "measured bubble": data["bubble_measured"], "predicted bubble": data["predicted_bubble"],
        "predicted - measured": difference, f"within {BUBBLE_TOLERANCE}": difference.abs() <= BUBBLE_TOLERANCE})
    if "bubble_measured_low" in data:  # the repeats' own spread: a miss beyond it is the model's, inside it the runs'
        low, high = data["bubble_measured_low"], data["bubble_measured_high"]
        table[REPEATS] = [f"{a:.3f}-{b:.3f}" for a, b in zip(low, high, strict=True)]
        table[NEAR_A_REPEAT] = data["predicted_bubble"].between(low - BUBBLE_TOLERANCE, high + BUBBLE_TOLERANCE)
        table["repeats' spread"] = high - low
    if "actions_over_predicted" in data and data["actions_over_predicted"].notna().any():
        table[ACTIONS] = data["actions_over_predicted"]
    return table


def _near_a_repeat(bubbles: pd.DataFrame) -> str:
    """How many predicted bubbles sit within the tolerance of one of their repeats measured, and how far apart the
    repeats' own bubbles lay: a configuration's measured bubble is one of several a rerun gives."""
    if NEAR_A_REPEAT not in bubbles:
        return ""
    spread = bubbles["repeats' spread"]
    widest = bubbles.loc[spread.idxmax()]
    return (f" {int(bubbles[NEAR_A_REPEAT].sum())} of {len(bubbles)} within {BUBBLE_TOLERANCE} of the bubble one of "
            f"their repeats measured (column `{NEAR_A_REPEAT}`); the repeats' bubbles lay a median "
            f"{spread.median():.3f} apart, at most {spread.max():.3f} ({widest['variant']} x{widest['devices']}, "
            f"{widest['panel']}).")


def _actions(bubbles: pd.DataFrame) -> str:
    """How long the runs' actions took against their predicted durations, over the configurations that timed them."""
    if ACTIONS not in bubbles or (ratios := bubbles[ACTIONS].dropna()).empty:
        return ""
    return (f" Their actions took a median {ratios.median():.2f} of the time PREDICTED for them ({ratios.min():.2f} to "
            f"{ratios.max():.2f} over {len(ratios)} configuration{'s' if len(ratios) > 1 else ''}, each its repeats' "
            f"median; column `{ACTIONS}`): "
            "far from 1 beside a bubble within reach, the calibrated compute missed, not the schedule.")


def section(ctx: Context) -> Section | None:
    memory, bubbles = memory_scores(ctx.runs), bubble_scores(ctx.runs)
    if memory.empty and bubbles.empty:
        return None
    text = []
    if not memory.empty:
        text.append("Memory: PREDICTED bytes by kind (each strategy's cost model) against torch's MemTracker on the "
                    "largest device, over the warm-up steps each run tracked (runs the tracker cannot follow, such as "
                    "pipelines, are not scored), the repeat whose total is the median; |error| by kind: "
                    + "; ".join(kind_summary(memory)) + "." + _inside(memory) + nearest_summary(memory))
    if not bubbles.empty:
        inside = int(bubbles[f"within {BUBBLE_TOLERANCE}"].sum())
        text.append(f"Bubbles: the PREDICTED idle share of each pipeline's step (its schedule's action table "
                    f"replayed with calibrated times) against the share its ranks measured: {inside} of "
                    f"{len(bubbles)} within {BUBBLE_TOLERANCE} of their repeats' median."
                    + _near_a_repeat(bubbles) + _actions(bubbles))
    memory = memory.drop(columns=[c for c in memory if c.endswith(NEAREST)])  # summed up in the text
    tables = [t.round(3) for t in (memory, bubbles) if not t.empty]
    return Section("Predicted memory and bubbles against measured", text, tables, appendix=True)
