"""Run records carried in a pytest-benchmark JSON file (``pytest --benchmark-json``; tests/benchmarks/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness.records import RecordError


def benchmark_records(path: Path) -> list[dict[str, Any]]:
    """Run records carried in a pytest-benchmark JSON file (``extra_info['record']`` of each benchmark)."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not pytest-benchmark's object")
        benchmarks = data.get("benchmarks", [])
        return [b["extra_info"]["record"] for b in benchmarks if "record" in (b.get("extra_info") or {})]
    except (OSError, json.JSONDecodeError, TypeError, AttributeError, KeyError) as exc:
        raise RecordError(f"cannot read benchmark JSON {path}: {type(exc).__name__}: {exc}") from None
