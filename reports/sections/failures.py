"""Skipped, failed, timed-out and unreadable: every configuration that gave no figures, with its reason."""

from __future__ import annotations

import pandas as pd

from reports.context import Context
from reports.render import Section


def section(ctx: Context) -> Section:
    results = ctx.results
    out = Section("Skipped, failed, timed-out and unreadable", appendix=True)
    if not results.failures.empty:
        out.tables.append(results.failures)
    if results.bad_lines:
        out.tables.append(pd.DataFrame(
            [{"file": str(p), "line": b.line_number, "reason": b.reason} for p, b in results.bad_lines]))
    if not out.tables:
        out.paragraphs.append("None: every configuration produced a record.")
    return out
