"""Plan: ``bench plan``'s ranked candidates per model, cluster and device count, every figure PREDICTED (and the
measured one beside it where ``--measure`` ran them), with the command that runs the best."""

from __future__ import annotations

import re

from reports.context import Context
from reports.render import Section

COLUMNS = ["rank", "configuration", "predicted samples/s", "predicted GiB per device", "tie with best",
           "measured samples/s", "slower than the one above"]


def section(ctx: Context) -> Section | None:
    plans = ctx.results.plans
    if plans.empty:
        return None
    text = ["PREDICTED: `bench plan` weighed every strategy and mesh the model admits, validated each by the runner's "
            "own rules, and ranked those predicted to fit by predicted samples/s; candidates within its tie band of "
            "the best are a tie. `measured samples/s` is filled only where `--measure` ran a candidate here."]
    tables = []
    for (model, devices, source), group in plans.groupby(["model", "devices", "source"], sort=True):
        best = group.sort_values("rank").iloc[0]
        text.append(f"{model} on {devices} device(s), from {_short(str(source))}: use {best['configuration']} "
                    f"(PREDICTED {best['predicted samples/s']:.1f} samples/s): `{best['command']}`")
        table = group.sort_values("rank")[COLUMNS]
        tables.append(table.dropna(axis=1, how="all").round(2))
    plans.to_csv(ctx.out / "plan.csv", index=False)
    return Section("Plan", text, tables)


def _short(source: str) -> str:
    """A profile by its part ("the NVIDIA H200 profile"; Predicted cluster gives its sources), a calibration
    by its file."""
    part = re.match(r"achievable shares of (.+?) data sheet", source)
    return f"the {part[1]} profile" if part else source.split(";")[0]
