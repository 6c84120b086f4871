"""reports/load.py: records into the report's tables."""

from __future__ import annotations

import json
from pathlib import Path

from reports.load import load
from tests.helpers.records import record


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_configurations_one_label_would_merge_are_told_apart_by_what_differs(tmp_path: Path) -> None:
    # As on the first H200 run: the knobs' `bench run` of single and the benchmark's case of single differ in
    # their warm-up only, and both rows read "single" beside each other.
    first, second, other = record("single", 1, 100.0), record("single", 1, 80.0), record("ddp", 2, 150.0)
    first["config"]["warmup"], second["config"]["warmup"], other["config"]["warmup"] = 3, 2, 2
    runs = load([_write(tmp_path / "r.jsonl", [first, second, other])]).runs
    assert list(runs["variant"]) == ["single [warmup=3]", "single [warmup=2]", "ddp"]
    assert runs["config_key"].nunique() == 3


def test_repeats_of_one_configuration_keep_its_plain_label(tmp_path: Path) -> None:
    runs = load([_write(tmp_path / "r.jsonl", [record("single", 1, 100.0, repeat=r) for r in range(3)])]).runs
    assert set(runs["variant"]) == {"single"}
