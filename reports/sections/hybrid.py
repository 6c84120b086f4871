"""Hybrid against its parts: does dp x pp compose without loss?"""

from __future__ import annotations

from reports.context import Context
from reports.render import Section
from reports.tables import hybrid_vs_parts


def section(ctx: Context) -> Section | None:
    table = hybrid_vs_parts(ctx.runs) if not ctx.runs.empty else None
    if table is None or table.empty:
        return None
    return Section("Hybrid against its parts", [
        "A dp x pp hybrid's efficiency over the product of ddp's on D devices and pp's on P (same schedule and "
        "micro-batches): 1.0 means they compose without loss; empty where a part was not measured."], [table])
