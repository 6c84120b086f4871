"""Verification against single: what ``bench verify`` found, and what it did not check."""

from __future__ import annotations

import math

from reports.context import Context
from reports.render import Section
from reports.tables import ran_elsewhere


def verdict(row: dict) -> str:
    """pass / FAIL / skipped, or "not checked" where verify ran the strategy on other devices than asked."""
    passed = row.get("passed")
    if passed is None or (isinstance(passed, float) and math.isnan(passed)):
        return f"skipped ({row.get('reason')})" if row.get("reason") else "skipped"
    if ran_elsewhere(row):
        return f"not checked on {row['devices']} devices: {row['reason']}"
    return "pass" if passed else "FAIL"


def section(ctx: Context) -> Section | None:
    verify = ctx.results.verify
    if verify.empty:
        return None
    table = verify.assign(result=[verdict(r) for r in verify.to_dict("records")])
    columns = [c for c in ("strategy", "model", "devices", "microbatches", "max_param_diff", "max_loss_diff",
                           "result") if c in table.columns]
    return Section("Verification against single", [
        "`bench verify`: each strategy's parameters and losses after the same steps against `single`'s."],
        [table[columns]], appendix=True)
