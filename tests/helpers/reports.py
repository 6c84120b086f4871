"""Reports built from records written by hand, for the report's tests: the results file, the pages, a what-if row."""

from __future__ import annotations

import json
from pathlib import Path

from bench.harness.records import RECORD_VERSION


def results_jsonl(tmp_path: Path, records: list[dict]) -> Path:
    """``records`` as a results file (JSON lines) in ``tmp_path``."""
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def built_report(tmp_path: Path, records: list[dict]) -> tuple[str, Path]:
    """The report of ``records``: its Markdown, and the folder beside it (figures, CSVs, HTML)."""
    from reports.build import build_report
    from reports.load import load

    out = tmp_path / "report"
    build_report(load([results_jsonl(tmp_path, records)]), out)
    return (out / "report.md").read_text(), out


def what_if_record(strategy: str, devices: int, samples_per_s: float, fits: bool, efficiency: float) -> dict:
    """A ``bench predict --hardware`` record of the large transformer on H200s."""
    return {"record_version": RECORD_VERSION, "kind": "prediction", "status": "ok", "strategy": strategy,
            "model": "transformer", "preset": "large", "device_count": devices, "global_batch_size": 16 * devices,
            "predicted_step_time_ms": 16 * devices / samples_per_s * 1e3, "predicted_samples_per_s": samples_per_s,
            "compute_source": "roofline from a data sheet", "hardware": "H200 SXM",
            "predicted_fits_memory": fits, "predicted_scaling_efficiency": efficiency,
            "predicted_memory_by_kind": {"total": (438256 if not fits else 60000) * 2**20},
            "config": {"strategy": strategy, "microbatches": 1, "schedule": "gpipe"}}
