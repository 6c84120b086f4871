"""Records -> tables: the only place that knows the record's field names."""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.harness import labels
from bench.harness.records import BadLine, RecordError, read_records
from reports.benchmark_json import benchmark_records
from reports.scaling import distinct_variants
from reports.spans import actions_over_predicted, start_delays
from strategies.mesh import DP, DP_SHARD, PP, TP

log = logging.getLogger(__name__)


@dataclass
class Results:
    """Everything a report draws from: successful runs, failed ones, verification, fidelity, and what was
    unreadable."""

    runs: pd.DataFrame
    failures: pd.DataFrame
    verify: pd.DataFrame
    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[tuple[Path, BadLine]] = field(default_factory=list)
    fidelity: pd.DataFrame = field(default_factory=pd.DataFrame)
    """One row per ``bench fidelity`` comparison (``fidelity_row``)."""
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)
    """``bench predict``'s records on their own (what-if): every figure predicted."""
    published: pd.DataFrame = field(default_factory=pd.DataFrame)
    """``bench predict --published``'s records: a prediction held against a published result (``published_row``)."""
    plans: pd.DataFrame = field(default_factory=pd.DataFrame)
    """``bench plan``'s ranked candidates (``plan_row``), PREDICTED, measured where ``--measure`` ran them."""

    @property
    def emulated(self) -> bool:
        return bool(len(self.runs)) and bool(self.runs["emulated"].any())


def variant(record: dict[str, Any]) -> str:
    """The strategy and the options that tell its sweep points apart: ``pp (1f1b, m=8)``."""
    return labels.variant({**(record.get("config") or {}), "strategy": record["strategy"]})


def run_label(record: dict[str, Any]) -> str:
    """The sweep's label of the run a record holds: ``pp (gpipe, m=4) mlp x2 b64 #1``."""
    return labels.run_label({**(record.get("config") or {}), "strategy": record["strategy"], "model": record["model"],
                             "devices": record["device_count"], "batch_size": record["global_batch_size"]})


# what a run's row keeps of its prediction (bench/harness/attach.py); prediction_fitted: the run's timings entered it
PREDICTED_FIELDS = ("predicted_step_time_ms", "predicted_step_time_ms_interval", "predicted_compute_ms",
                    "predicted_exposed_comm_ms", "predicted_update_ms", "predicted_bubble", "predicted_memory_by_kind")


def run_row(record: dict[str, Any]) -> dict[str, Any]:
    config = record["config"]
    median, iqr, batch = record["step_time_ms_median"], record["step_time_ms_iqr"], record["global_batch_size"]
    times = record.get("step_times_ms") or [median]
    q1, _, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (median, median, median)
    peaks = record["peak_mem_bytes"] or [0]
    fields = record.get("strategy_fields") or {}
    prediction = record.get("prediction") or {}
    return {
        "strategy": record["strategy"],
        "variant": variant(record),
        # One configuration across its repeats: the whole config but where its record went and which repeat.
        "config_key": json.dumps({k: v for k, v in sorted(config.items()) if k not in ("out", "repeat")}),
        "config": config,
        "fields": fields,
        "repeat": config.get("repeat") or 0,
        "disturbed": bool(record.get("disturbed")),
        "profiled": bool(record.get("profile_traces")),
        "precision": record.get("precision") or config.get("precision") or "",
        "model": record["model"],
        "preset": record["preset"],
        # One plot panel per model and size: a tiny and a small ResNet do not share an axis.
        "panel": f"{record['model']}/{record['preset']}",
        "devices": record["device_count"],
        "scaling": config.get("scaling") or "single run",
        "global_batch": batch,
        "samples_per_s": record["samples_per_s"],
        # Throughput at the quartiles of the step time: the error bars of the throughput plots.
        "samples_per_s_low": batch / (q3 / 1e3),
        "samples_per_s_high": batch / (q1 / 1e3),
        "step_time_ms": median,
        "step_time_iqr_ms": iqr,
        "peak_mem_source": record["peak_mem_source"],
        "peak_mem_mib_per_device": max(peaks) / 2**20,
        **_memory_by_kind_mib(record.get("memory_by_kind")),
        # bench/harness/comm.py: floating-point payload each rank handed to gloo/NCCL in one step (mean over ranks)
        "comm_mib_per_step": float("nan" if (comm := record.get("comm_bytes_per_step_mean")) is None else comm) / 2**20,
        "mfu": record.get("mfu") if record.get("mfu") is not None else float("nan"),
        "emulated": bool(record["emulated"]),
        "oversubscribed": bool(record.get("oversubscribed")),
        "microbatches": config.get("microbatches"),
        "schedule": config.get("schedule"),
        "norm": config.get("norm"),
        "bubble_measured": fields.get("measured_bubble_fraction"),
        "bubble_theoretical": fields.get("theoretical_bubble_fraction"),
        "actions_over_predicted": actions_over_predicted(fields.get("timeline"), prediction.get("predicted_timeline")),
        **start_delays(fields.get("timeline")),
        "update_fraction": fields.get("update_fraction"),
        "stage_imbalance": fields.get("stage_imbalance"),
        "stages_per_rank": config.get("stages_per_rank", 1),
        DP: fields.get(DP),
        DP_SHARD: fields.get(DP_SHARD, 1 if fields.get(DP) else None),
        PP: fields.get(PP),
        TP: fields.get(TP, 1 if fields.get(DP) else None),
        "parts": fields.get("parts"),
        "accelerator": record["accelerator"],
        "device_memory_bytes": (record.get("env") or {}).get("device_memory_bytes"),
        "processes": record.get("processes") or record["device_count"],
        **{name: prediction.get(name) for name in PREDICTED_FIELDS},
        "prediction_fitted": prediction.get("fitted"),
        "update_ms": fields.get("update_ms"),
        "prediction_error": record.get("prediction_error"),
    }


MEMORY_KINDS = ("parameters", "gathered_parameters", "gradients", "optimizer_state", "activations", "temporaries",
                "buffers", "total")


def _memory_by_kind_mib(tracked: object) -> dict[str, float]:
    """The largest device's bytes of each kind (bench/harness/memory.py), in MiB; NaN where the run tracked none."""
    devices = tracked if isinstance(tracked, list) and tracked else None
    if devices is None:
        return {f"mem_{kind}_mib": float("nan") for kind in MEMORY_KINDS}
    largest = max(devices, key=lambda d: d.get("total", 0))
    return {f"mem_{kind}_mib": largest.get(kind, 0) / 2**20 for kind in MEMORY_KINDS}


def load(paths: list[Path]) -> Results:
    """Reads run records and ``bench verify`` rows; torn lines are kept aside with their line numbers."""
    records, bad = [], []
    for path in paths:
        if path.suffix == ".json":
            records += _checked(path, benchmark_records(path))
            continue
        good, broken = read_records(path)
        records += _checked(path, good)
        bad += [(path, b) for b in broken]
    runs = distinct_variants(pd.DataFrame([run_row(r) for r in records if r.get("kind", "run") == "run"
                                           and r["status"] == "ok"]))
    failures = [
        {"strategy": r["strategy"], "model": r["model"], "devices": r["device_count"], "status": r["status"],
         "reason": r.get("reason", "")}
        for r in records if r.get("kind", "run") == "run" and r["status"] != "ok"
    ]
    verify = [r for r in records if r.get("kind") == "verify"]
    fidelity = pd.DataFrame([fidelity_row(r) for r in records if r.get("kind") == "fidelity" and r["status"] == "ok"])
    if not fidelity.empty:
        # A rerun of `bench fidelity` into the same file supersedes its earlier figures from the same machine.
        fidelity = fidelity.drop_duplicates(subset=["name", "model", "machine"], keep="last").reset_index(drop=True)
    predictions = pd.DataFrame([prediction_row(r) for r in records if _kind(r) == "prediction"])
    published = pd.DataFrame([published_row(r) for r in records if _kind(r) == "published"])
    plans = pd.DataFrame([plan_row(r) for r in records if _kind(r) == "plan"])
    return Results(runs, pd.DataFrame(failures), pd.DataFrame(verify), records, bad, fidelity=fidelity,
                   predictions=predictions, published=published, plans=plans)


def _kind(record: dict[str, Any]) -> str:
    """The record's kind as the report reads it: a prediction held against a published result (it names the
    ``published_id``) is read apart from a what-if prediction, though both are written as ``prediction``."""
    kind = str(record.get("kind", "run"))
    return "published" if kind == "prediction" and "published_id" in record else kind


def prediction_row(record: dict[str, Any]) -> dict[str, Any]:
    """A ``bench predict`` record as a report row; its figures keep the word predicted."""
    memory = record.get("predicted_memory_by_kind") or {}
    devices = record["device_count"]
    fits = record.get("predicted_fits_memory")
    efficiency = record.get("predicted_scaling_efficiency")
    return {"model": f"{record['model']}/{record['preset']}", "strategy": record["strategy"],
            "variant": variant(record) if isinstance(record.get("config"), dict) else record["strategy"],
            "hardware": str(record.get("hardware") or record.get("accelerator") or "?"),
            "devices": devices, "global_batch": record["global_batch_size"],
            "predicted samples/s": record["predicted_samples_per_s"],
            "predicted samples/s per device": record["predicted_samples_per_s"] / devices,
            "predicted step ms": record["predicted_step_time_ms"],
            "predicted MiB per device": (memory.get("total") or 0) / 2**20,
            "predicted fits memory": "unknown" if fits is None else ("yes" if fits else "DOES NOT FIT"),
            "predicted scaling efficiency": float("nan") if efficiency is None else float(efficiency),
            "predicted bubble": record.get("predicted_bubble"),
            "predicted compute ms": record.get("predicted_compute_ms"),
            "predicted exposed comm ms": record.get("predicted_exposed_comm_ms"),
            "predicted update ms": record.get("predicted_update_ms"),
            "compute from": record["compute_source"],
            "published check": next((a.split("; bench predict")[0] for a in record.get("assumptions") or []
                                     if a.startswith(("checked on", "not checked"))), None)}


def plan_row(record: dict[str, Any]) -> dict[str, Any]:
    """A ``bench plan`` candidate as a report row: its rank, PREDICTED figures, measured ones where it ran."""
    measured = record.get("measured_samples_per_s")
    return {"model": f"{record['model']}/{record['preset']}", "devices": record["device_count"],
            "global_batch": record["global_batch_size"], "source": record["source"], "rank": record["plan_rank"],
            "configuration": record["label"],
            "predicted samples/s": record["predicted_samples_per_s"],
            "predicted GiB per device": float(str(record["predicted_memory_bytes_per_device"])) / 2**30,
            "tie with best": "tie" if record["tie_with_best"] and record["plan_rank"] != 1 else "",
            "slower than the one above": record.get("slower_than_above") or "",
            "measured samples/s": float("nan") if measured is None else float(str(measured)),
            "command": record["command"]}


def published_row(record: dict[str, Any]) -> dict[str, Any]:
    """A prediction of a published result (``bench predict --published``): the row, both values, the error."""
    status = str(record.get("status") or "ok")
    return {"published_id": record["published_id"], "metric": record["metric"], "status": status,
            "published": record.get("published_value"), "predicted": record.get("predicted_value"),
            "error": record.get("error") if status == "ok" else None, "reason": record.get("reason") or ""}


REQUIRED = {
    "run": ("status", "strategy", "model", "preset", "accelerator", "device_count", "config"),
    "run ok": ("global_batch_size", "samples_per_s", "step_time_ms_median", "step_time_ms_iqr", "peak_mem_bytes",
               "peak_mem_source", "emulated"),
    "verify": ("strategy", "model", "devices", "passed"),
    "fidelity": ("status", "comparison", "name", "model", "preset", "target", "accelerator", "emulated"),
    "prediction": ("strategy", "model", "preset", "device_count", "global_batch_size", "predicted_step_time_ms",
                   "predicted_samples_per_s", "compute_source"),
    "published": ("published_id", "metric", "status"),
    "published ok": ("published_value", "predicted_value", "error"),
    "plan": ("plan_rank", "label", "model", "preset", "device_count", "global_batch_size", "source",
             "predicted_samples_per_s", "predicted_memory_bytes_per_device", "tie_with_best", "command"),
}
"""The fields the report reads of each kind of record: a record without them is foreign or truncated."""


def _checked(path: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` as they are, once each has what the report reads; else RecordError naming the first gap."""
    for number, record in enumerate(records, start=1):
        kind = _kind(record)
        if kind not in REQUIRED:
            raise RecordError(f"{path}: record {number} is of kind {kind!r}; this report reads run, verify, "
                              "fidelity, prediction and plan records")
        ok = record.get("status") == "ok"
        wanted = [*REQUIRED[kind], *(REQUIRED[f"{kind} ok"] if ok and f"{kind} ok" in REQUIRED else ())]
        missing = [name for name in wanted if name not in record]
        if missing or (kind == "run" and not isinstance(record["config"], dict)):
            raise RecordError(f"{path}: record {number} ({kind}) lacks {', '.join(missing) or 'a config object'}; "
                              "written by another tool, or truncated? Pass only files the suite wrote")
    return records


def fidelity_row(record: dict[str, Any]) -> dict[str, Any]:
    """A ``bench fidelity`` record as a report row: what was compared, the figure it measured, the target."""
    met = record.get("met")
    return {
        "comparison": record["comparison"],
        "name": record["name"],
        "model": f"{record['model']}/{record['preset']}",
        "measured": _fidelity_figure(record),
        "target": record["target"],
        # None: a figure shown for information, held to no target.
        # an interval that crosses the target's bound: the rounds did not decide it
        "met": "-" if met is None else ("yes" if met else "no") + (
            " (not settled: its interval crosses the target)" if record.get("settled") is False else ""),
        "machine": _machine(record),
        "emulated": bool(record["emulated"]),
        "held_to_target": met is not None,
        "share_of_ideal": record.get("share_of_ideal"),
        "share_of_ideal_interval": record.get("share_of_ideal_interval"),
        "predicted_steps": record.get("predicted_steps"),
        "suite_ms": record.get("suite_ms"),  # pp's and mp's measured steps, for the account's sides
        "baseline_ms": record.get("baseline_ms"),
    }


# The figures of a comparison, for records written before they carried their own ``figure`` text.
_OLDER_FIGURES = ("ratio", "speedup", "share_of_ideal", "measured_bubble_fraction", "theoretical_bubble_fraction",
                  "suite_ms", "baseline_ms")


def _fidelity_figure(record: dict[str, Any]) -> str:
    """The measured figure as ``bench fidelity`` wrote it, or an older record's figures by name."""
    if "figure" in record:
        return str(record["figure"])
    return ", ".join(f"{name} {record[name]:.3g}" for name in _OLDER_FIGURES if record.get(name) is not None)


def _machine(record: dict[str, Any]) -> str:
    """Host and accelerator: ``vm, cpu (AMD EPYC, 2 cores)`` or ``node1, cuda (2 x NVIDIA H200)``."""
    env = record.get("env") or {}
    gpus = env.get("gpu_names") or []
    cpu = f"{env.get('cpu_model', 'unknown CPU')}, {env.get('cpu_cores', '?')} cores"
    what = f"{len(gpus)} x {gpus[0]}" if record["accelerator"] == "cuda" and gpus else cpu
    return f"{env.get('hostname', 'unknown host')}, {record['accelerator']} ({what})"
