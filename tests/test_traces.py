"""Traces: a run's torch.profiler trace (--profile), and pipeline timelines as trace files (bench/harness/traces.py,
reports/traces.py). Both must load as Chrome trace-event JSON with the expected events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.records import read_records
from reports.build import build_report
from reports.load import load
from reports.traces import timeline_events
from tests.helpers.cli import run_bench
from tests.helpers.records import RECORDS


def test_a_timeline_becomes_one_track_per_rank_and_stage_with_spans_named_by_kind_and_microbatch() -> None:
    spans = [{"rank": 0, "stage": 0, "microbatch": 0, "kind": "F", "start_ms": 0.0, "end_ms": 1.5},
             {"rank": 1, "stage": 1, "microbatch": 0, "kind": "B", "start_ms": 2.0, "end_ms": 4.0}]
    events = timeline_events(spans)["traceEvents"]
    names = [e for e in events if e["ph"] == "M"]
    assert [e["args"]["name"] for e in names] == ["rank 0", "rank 1"]
    spans_out = [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"]
    assert spans_out == [("F0", 0, 0, 0.0, 1500.0), ("B0", 1, 1, 2000.0, 2000.0)]


def test_the_report_writes_and_links_every_pipeline_timeline(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    out = tmp_path / "report"
    build_report(load([path]), out)
    traces = sorted((out / "traces").glob("*.trace.json"))
    assert len(traces) == 3  # the pp run with a timeline, once per repeat
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert {e["name"] for e in events if e["ph"] == "X"} >= {"F0", "B3"}
    assert "## Traces" in (out / "report.md").read_text() and "traces/" in (out / "report.md").read_text()


@pytest.mark.launches
def test_profile_writes_a_trace_per_rank_the_record_names(tmp_path: Path) -> None:
    out, folder = tmp_path / "r.jsonl", tmp_path / "profiles"
    proc = run_bench("run", "--model", "mlp", "--preset", "tiny", "--steps", "4", "--warmup", "1",
                     "--profile", str(folder), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = read_records(out)[0]
    (trace,) = record["profile_traces"]
    events = json.loads(Path(trace).read_text())["traceEvents"]
    assert Path(trace).is_relative_to(folder)
    names = {e.get("name", "") for e in events}
    assert any(name.startswith("ProfilerStep") for name in names)  # the profiled steps
    assert any(name.startswith("aten::") for name in names)  # and the ops inside them
