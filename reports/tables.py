"""The numbers behind the figures: scaling against ``single``, verification status, the summary."""

from __future__ import annotations

import math

import pandas as pd

from bench.harness.labels import VERIFIED_CLASS
from bench.harness.stats import with_interval
from strategies import REFERENCE as REFERENCE_STRATEGY
from strategies import STRATEGIES
from strategies.mesh import DIMS, DP, PP
from strategies.options import MeshOptions

VERIFIED, NOT_VERIFIED, WRONG = "pass", "not verified", "FAIL"
REFERENCE = "reference"
PASS_THROUGH = "not checked: pass-through on CPU"


def with_verification(runs: pd.DataFrame, verify: pd.DataFrame) -> pd.DataFrame:
    """Adds ``verified``: pass / FAIL where ``bench verify`` checked this very class of run (strategy, model,
    norm, schedule, micro-batches, precision), else why not: not verified, not exact (batch-split
    BatchNorm), or not checked (nn.DataParallel's CPU pass-through). ``single`` is the reference."""
    if runs.empty:
        return runs
    verdicts: dict[tuple, str] = {}
    for row in verify.to_dict("records") if not verify.empty else []:
        passed = row.get("passed")
        if passed is None or (isinstance(passed, float) and math.isnan(passed)):
            continue  # skipped: no verdict
        if ran_elsewhere(row):
            continue  # e.g. dp checked on 1 device: says nothing about 2
        key = _class_key(row)
        ok = bool(passed) and verdicts.get(key, VERIFIED) == VERIFIED
        verdicts[key] = VERIFIED if ok else WRONG
    return runs.assign(verified=[_verified(row, verdicts) for row in runs.to_dict("records")])


NORMALISED = {"cnn"}
"""The model families whose ``--norm`` changes what a run computes (the transformer's LayerNorm is per token and
ignores ``--norm``)."""


def _reads_a_mesh(strategy: str) -> bool:
    """Whether the class's degrees are the strategy's mesh (the tp strategy records a ``tp`` of its own, its
    --devices, which is not a mesh degree)."""
    cls = STRATEGIES.get(strategy)
    return cls is not None and MeshOptions in cls.reads


def _class_key(row: dict) -> tuple:
    def part(c: str) -> object:
        ignored = ((c == "norm" and row["model"] not in NORMALISED)
                   or (c in DIMS and not _reads_a_mesh(row["strategy"])))
        return None if ignored else _plain(row.get(c))

    return (row["strategy"], row["model"], *(part(c) for c in VERIFIED_CLASS))


def _plain(value: object) -> object:
    """A missing value as None (pandas writes NaN in a column where some rows have numbers: the degrees)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def ran_elsewhere(row: dict) -> bool:
    """A verify row whose strategy ran on fewer devices than it was asked for (bench/experiments/verify.py's reason
    ``ran on 1 device(s), not 2``): it checked another configuration."""
    return str(row.get("reason") or "").startswith("ran on ")


def _verified(row: dict, verdicts: dict[tuple, str]) -> str:
    cls = STRATEGIES.get(row["strategy"])
    if cls is not None and cls.is_reference:
        return REFERENCE
    if cls is not None and cls.needs_gpus and row["accelerator"] != "cuda":
        return PASS_THROUGH
    verdict = verdicts.get(_class_key(row))
    if verdict is not None:
        return verdict
    splits = (cls is not None and cls.splits_the_batch and row["devices"] > 1) or (row.get("microbatches") or 1) > 1
    if row.get("norm") == "batch" and splits and row["model"] == "cnn":
        return "not exact: batch-split BatchNorm"
    return NOT_VERIFIED


def fastest(runs: pd.DataFrame) -> pd.DataFrame:
    """For each model, device count and global batch, the fastest configuration not shown to be wrong,
    named only where its throughput interval clears every other's; else the tie, or why none is named."""
    if runs.empty:
        return runs
    rows = []
    for (panel, devices, batch), every in runs.groupby(["panel", "devices", "global_batch"], sort=True):
        # nn.DataParallel on CPU runs the plain model: not a parallel strategy, so never "fastest".
        group = every[(every["verified"] != WRONG) & (every["verified"] != PASS_THROUGH) & ~every["all_disturbed"]]
        if group.empty:  # nothing left to rank: say why rather than drop the panel
            rows.append({"panel": panel, "devices": devices, "global_batch": batch, "fastest": _unranked(every),
                         "winners": (), "samples_per_s": "", "speedup": "", "repeats": 0, "verified": "",
                         "emulated": bool(every["emulated"].any())})
            continue
        ranked = group.sort_values("samples_per_s", ascending=False)
        best = ranked.iloc[0]
        rows.append({"panel": panel, "devices": devices, "global_batch": batch, "fastest": _verdict(ranked),
                     "winners": _winners(ranked),
                     "samples_per_s": with_interval(best["samples_per_s"], best["samples_per_s_low"],
                                                    best["samples_per_s_high"], 1),
                     "speedup": with_interval(best["speedup"], best["speedup_low"], best["speedup_high"]),
                     "baseline": best.get("baseline", REFERENCE_STRATEGY), "repeats": best["repeats"],
                     "verified": best["verified"], "emulated": best["emulated"]})
    table = pd.DataFrame(rows)
    return table if _baseline_column(table) else table.drop(columns="baseline", errors="ignore")


def _unranked(every: pd.DataFrame) -> str:
    """Why a panel whose every configuration was left out names no fastest."""
    if (every["verified"] == PASS_THROUGH).all():
        return "not ranked: only dp ran, a pass-through on CPU"
    if every["all_disturbed"].all():
        return "not ranked: every run was disturbed by other work on the machine"
    return "not ranked: every configuration was shown wrong by `bench verify`"


def _ranked(ranked: pd.DataFrame) -> bool:
    """Whether the fastest median has the repeats an interval needs (the others are held to it)."""
    return bool(ranked.iloc[0]["repeats"] >= 2)


def _winners(ranked: pd.DataFrame) -> tuple[str, ...]:
    """The fastest and every configuration within noise of it (its interval, or its one run's figure, reaching
    the fastest's interval); the fastest median alone where there is nothing to rank or too few repeats to rank it."""
    best, others = ranked.iloc[0], ranked.iloc[1:]
    if others.empty or not _ranked(ranked):
        return (str(best["variant"]),)
    reach = others["samples_per_s_high"].where(others["repeats"] >= 2, others["samples_per_s"])
    return (str(best["variant"]), *others[reach >= best["samples_per_s_low"]]["variant"])


def _verdict(ranked: pd.DataFrame) -> str:
    """The winner where its interval clears the runner-up's; else the strategies within noise of it. A panel
    is ranked once its fastest median has repeats: a configuration whose other runs were disturbed (one run
    left) is held to it by that run, and the verdict says how many were."""
    best, winners = ranked.iloc[0], _winners(ranked)
    if len(ranked) == 1:
        return f"{best['variant']} (the only one measured)"
    if not _ranked(ranked):
        return f"not ranked: fewer than 2 repeats (fastest median: {best['variant']})"
    verdict = winners[0] if len(winners) == 1 else "tie (within noise): " + ", ".join(winners)
    single = int((ranked["repeats"] < 2).sum())
    return verdict + (f" ({single} of {len(ranked)} held to it by one run)" if single else "")


def _baseline_column(table: pd.DataFrame) -> list[str]:
    """``baseline`` where some row's speed-up is not over ``single`` (reports/scaling.py), else nothing."""
    return ["baseline"] if "baseline" in table and (table["baseline"] != REFERENCE_STRATEGY).any() else []


def hybrid_vs_parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Each composed run's efficiency against the product of its parts', the runs its record names by
    strategy (``parts``: hybrid's dp x pp names ``ddp`` on D devices and ``pp`` on P devices at its per-device
    batch, pp with its schedule and micro-batches). 1.0: the parts compose perfectly; NaN: a part was not
    measured. An N-D mesh beyond dp x pp names no parts (strategies/composition.py)."""
    if runs.empty or "parts" not in runs:
        return pd.DataFrame()
    rows = []
    for h in runs.itertuples():
        parts = h.parts if isinstance(h.parts, dict) else {}
        if not parts:
            continue
        efficiency = {f"{name}_efficiency": _part_efficiency(runs, h.panel, part) for name, part in parts.items()}
        rows.append({"panel": h.panel, "variant": h.variant, DP: h.dp, PP: h.pp, "efficiency": h.efficiency,
                     **efficiency, "vs_product_of_parts": h.efficiency / math.prod(efficiency.values())})
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
