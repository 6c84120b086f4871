"""What every section reads, computed once: configurations, baselines, leaders (reports/context.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.context import context
from reports.load import Results, load
from tests.helpers.records import RECORDS, VERIFY


def _load(tmp_path: Path, records: list[dict]) -> Results:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return load([path])


def test_the_context_holds_each_configuration_with_its_speed_up_and_verdict_the_singles_and_the_leaders(
    tmp_path: Path,
) -> None:
    ctx = context(_load(tmp_path, [*RECORDS, *VERIFY]), tmp_path / "out")
    assert len(ctx.runs) == 11 and ctx.out == tmp_path / "out"  # 11 configurations of 33 runs
    runs = ctx.runs.set_index(["panel", "variant"])
    assert runs.loc[("mlp/small", "ddp"), "speedup"] == pytest.approx(1.8)
    assert runs.loc[("mlp/small", "ddp"), "verified"] == "pass"
    assert runs.loc[("mlp/small", "pp (gpipe, m=4)"), "verified"] == "FAIL"
    assert sorted(zip(ctx.baseline["panel"], ctx.baseline["samples_per_s"], strict=True)) == \
        [("cnn/small", 50.0), ("mlp/small", 100.0)]
    leaders = ctx.leaders.set_index(["panel", "devices"])["fastest"]
    assert leaders[("mlp/small", 2)] == "ddp"  # pp (m=4) is faster, but verify found it wrong
    assert ctx.emulated and ctx.verify_read


def test_records_without_runs_give_empty_tables_and_say_whether_verify_was_read(tmp_path: Path) -> None:
    ctx = context(_load(tmp_path, VERIFY), tmp_path)
    assert ctx.runs.empty and ctx.baseline.empty and ctx.leaders.empty
    assert not ctx.emulated and ctx.verify_read
