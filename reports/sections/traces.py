"""Traces: each pipeline run's timeline as a Chrome trace file (written here), and the runs' profiler traces."""

from __future__ import annotations

import pandas as pd

from bench.harness.labels import file_name
from reports.context import Context
from reports.load import run_label
from reports.render import Section
from reports.traces import write_timeline_trace


def section(ctx: Context) -> Section:
    results, out = ctx.results, ctx.out
    """Links to the traces: each pipeline run's timeline (written here) and the runs' --profile traces."""
    rows = []
    for record in (r for r in results.records if r.get("kind", "run") == "run"):
        fields = record.get("strategy_fields") or {}
        predicted = (record.get("prediction") or {}).get("predicted_timeline")
        if not (record.get("status") == "ok" and (fields.get("timeline") or record.get("profile_traces") or predicted)):
            continue
        label = run_label(record)
        if fields.get("timeline"):
            path = write_timeline_trace(fields["timeline"], out / "traces" / f"{file_name(label)}.trace.json")
            rows.append({"run": label, "trace": str(path.relative_to(out)), "what": "pipeline timeline"})
        predicted = (record.get("prediction") or {}).get("predicted_timeline")
        if predicted:
            path = write_timeline_trace(predicted, out / "traces" / f"{file_name(label)}.predicted.trace.json")
            rows.append({"run": label, "trace": str(path.relative_to(out)), "what": "PREDICTED pipeline timeline"})
        for trace in record.get("profile_traces") or []:
            rows.append({"run": label, "trace": trace, "what": "torch.profiler, last timed steps"})
    if not rows:
        return Section("Traces", appendix=True, paragraphs=[
            "No pipeline timelines or profiler traces among the records (`bench run --profile "
                                  "DIR` or `bench sweep --profile DIR` writes the latter)."])
    return Section("Traces", appendix=True, paragraphs=[
        "Chrome trace-event files: open them in Perfetto (https://ui.perfetto.dev, Open trace file) or TensorBoard. "
        "A pipeline timeline has one track per rank and stage, each span named by kind and micro-batch (F3: the "
        "forward of micro-batch 3); profiled runs are left out of the comparisons above."],
        tables=[pd.DataFrame(rows).drop_duplicates()])
