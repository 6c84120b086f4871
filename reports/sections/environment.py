"""Environment: the machines and software the records came from, one row per machine."""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.context import Context
from reports.render import Section

VERSIONS = ("cudnn", "nccl")
"""Library versions recorded as integers (cuDNN 9.24.0 is 92400): shown as text, never as "92,400"."""


def rows(records: list[dict]) -> list[dict[str, Any]]:
    """One row per host, torch and GPU set; records without an ``env`` (verify, predictions) add none."""
    envs: dict[tuple, dict] = {}
    for record in records:
        env = record.get("env")
        if not env:
            continue
        envs[(env.get("hostname"), env.get("torch"), tuple(env.get("gpu_names") or ()))] = env
    shown = []
    for env in envs.values():
        row = {k: v for k, v in env.items() if k != "topology"}
        for key in VERSIONS:
            if row.get(key) is not None:
                row[key] = str(row[key])
        shown.append(row)
    return shown


def section(ctx: Context) -> Section:
    found = rows(ctx.results.records)
    out = Section("Environment", tables=[pd.DataFrame(found)] if found else [], appendix=True)
    if not found:
        out.paragraphs.append("No record carried its machine's environment (verify and prediction records do not).")
    topologies = {t for r in ctx.results.records if (t := (r.get("env") or {}).get("topology")) is not None}
    if topologies:
        out.preformatted = "\n\n".join(sorted(topologies))
    return out
