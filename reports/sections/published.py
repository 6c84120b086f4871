"""Checked against published results: ``bench predict --published``'s records, each prediction beside what was
published, the median and largest |error|, and every row the suite could not express with its reason."""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.context import Context
from reports.render import Section


def summary(published: pd.DataFrame) -> dict[str, Any]:
    """Rows checked and skipped, median and largest |error| over the checked ones (None without any)."""
    checked = published[published["status"] == "ok"]
    errors = checked["error"].astype(float).abs()
    return {"checked": len(checked), "skipped": int((published["status"] != "ok").sum()),
            "median |error|": float(errors.median()) if len(errors) else None,
            "max |error|": float(errors.max()) if len(errors) else None,
            "worst": str(checked.loc[errors.idxmax(), "published_id"]) if len(errors) else None}


def section(ctx: Context) -> Section | None:
    published = ctx.results.published
    if published.empty:
        return None
    s = summary(published)
    text = [f"PREDICTED values held against results others published (`bench predict --published FILE`): "
            f"{s['checked']} rows checked, {s['skipped']} skipped; error = predicted / published - 1."]
    if s["median |error|"] is not None:
        text.append(f"Median |error| {s['median |error|']:.1%}, largest {s['max |error|']:.1%} ({s['worst']}).")
    checked = published[published["status"] == "ok"].sort_values("published_id")
    table = checked[["published_id", "metric", "published", "predicted", "error"]].rename(
        columns={"predicted": "predicted (PREDICTED)"})
    skipped = published[published["status"] != "ok"][["published_id", "metric", "reason"]]
    published.to_csv(ctx.out / "published.csv", index=False)
    return Section("Checked against published results", text,
                   [t for t in (table.round(4), skipped) if not t.empty])
