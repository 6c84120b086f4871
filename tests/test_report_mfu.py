"""MFU per strategy, where some run knew its devices' peak FLOP/s (reports/sections/mfu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from reports.load import load
from tests.helpers.records import record


def test_mfu_is_drawn_per_strategy_where_some_run_knows_its_peak(tmp_path: Path) -> None:
    from reports.context import context
    from reports.sections import mfu

    path = tmp_path / "gpu.jsonl"
    rows = [{**record("single", 1, 100.0), "mfu": 0.4}, {**record("ddp", 2, 180.0), "mfu": 0.36}, record("mp", 2, 90.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = load([path])
    assert list(results.runs["mfu"].isna()) == [False, False, True]
    section = mfu.section(context(results, tmp_path))
    assert section.figures == [tmp_path / "mfu.png"] and "left out" not in section.paragraphs[0]
    assert (tmp_path / "mfu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = pd.read_csv(tmp_path / "mfu.csv")
    assert sorted(data["mfu"]) == [0.36, 0.4] and set(data["variant"]) == {"single", "ddp"}
