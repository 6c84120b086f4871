"""A pipeline step's timeline (a record's spans) as a Chrome trace-event file, for Perfetto or TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def timeline_events(timeline: list[dict[str, Any]]) -> dict[str, Any]:
    """A pipeline step's spans (strategies/timing.py) as trace events: one track per rank and stage, each
    span named by its kind and micro-batch (``F3``: the forward of micro-batch 3)."""
    names = {"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weight)"}
    events: list[dict[str, Any]] = []
    for rank in sorted({int(s["rank"]) for s in timeline}):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
    for span in timeline:
        start, end = float(span["start_ms"]), float(span["end_ms"])
        kind = str(span["kind"])
        events.append({"name": f"{kind}{span['microbatch']}", "cat": names.get(kind, kind), "ph": "X",
                       "ts": start * 1e3, "dur": (end - start) * 1e3, "pid": int(span["rank"]),
                       "tid": int(span.get("stage", 0)),
                       "args": {"stage": span.get("stage"), "microbatch": span["microbatch"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_timeline_trace(timeline: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(timeline_events(timeline)))
    return path
