"""``bench predict --published FILE``: every row of a file of published GPU results, predicted and compared.

A row names a model by its dimensions, a GPU part, a mesh and a batch (columns in
../shared/published/README.md; a copy with its source lines is bench/predict/data/). Each row gives one
record of kind ``prediction``: ``published_value``, ``predicted_value`` and ``error`` (predicted /
published - 1), or ``status: "skipped"`` with the reason where the suite cannot express the row. Nothing
is keyed on ``id``: it is only carried into the record as ``published_id``.
"""

from __future__ import annotations

import csv
import datetime
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.records import RECORD_VERSION
from bench.predict.achievable import Mesh, StepEstimate, images_per_s, resnet_step, transformer_step
from bench.predict.profiles import FABRICS, GIB, GPUS, SHARES
from models.decoder import DecoderDims
from strategies import Strategy
from strategies.ddp import DistributedDataParallelStrategy
from strategies.fsdp import FSDPStrategy
from strategies.mesh import DIMS, DP, DP_SHARD, PP, TP

METRICS = ("images_per_s_total", "tokens_per_s_per_gpu", "memory_gib_per_gpu")
COLUMNS = ("id", "family", "dims", "gpu", "gpus", "gpus_per_node", "inter_node", DP, DP_SHARD, TP, PP,
           "micro_batch", "grad_accum", "global_batch", "precision", "activation_checkpointing", "compile",
           "metric", "value")
PRECISIONS = ("tf32", "amp-fp16", "bf16", "bf16-pure")


class Skip(ValueError):
    """A row the suite cannot express; the message says why."""


def read_rows(path: Path) -> list[dict[str, str]]:
    """The file's rows; ValueError (one line) naming the columns it lacks."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} lacks the column(s) {', '.join(missing)}; expected those of "
                             f"../shared/published/train.csv ({', '.join(COLUMNS)})")
        return list(reader)


def parse_dims(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(";") if pair)


def _mesh(row: dict[str, str]) -> Mesh:
    number = {key: int(row[key]) for key in ("gpus", "gpus_per_node", *DIMS, "micro_batch", "grad_accum",
                                              "global_batch")}
    if number[TP] > 1 or number[PP] > 1:
        raise Skip(f"tp {number[TP]} x pp {number[PP]}: only data parallelism (dp, dp_shard) is modelled here")
    if number[DP] * number[DP_SHARD] != number["gpus"]:
        raise Skip(f"dp {number[DP]} x dp_shard {number[DP_SHARD]} != gpus {number['gpus']}")
    if number["micro_batch"] * number["grad_accum"] * number["gpus"] != number["global_batch"]:
        raise Skip(f"micro_batch {number['micro_batch']} x grad_accum {number['grad_accum']} x gpus "
                   f"{number['gpus']} != global_batch {number['global_batch']}")
    if row["precision"] not in PRECISIONS:
        raise Skip(f"precision {row['precision']!r}; modelled: {', '.join(PRECISIONS)}")
    return Mesh(number["gpus"], number["gpus_per_node"], number[DP], number[DP_SHARD], number["micro_batch"],
                number["grad_accum"], row["precision"], row["activation_checkpointing"], row["compile"] == "on")


def predict_row(row: dict[str, str]) -> tuple[float, StepEstimate]:
    """The predicted value of the row's metric and the step behind it; Skip where it cannot be expressed."""
    if row["gpu"] not in GPUS:
        raise Skip(f"gpu {row['gpu']!r} has no profile; profiles: {', '.join(GPUS)}")
    if row["inter_node"] not in FABRICS:
        raise Skip(f"inter_node {row['inter_node']!r} has no profile; fabrics: {', '.join(FABRICS)}")
    if row["metric"] not in METRICS:
        raise Skip(f"metric {row['metric']!r}; predicted: {', '.join(METRICS)}")
    gpu, mesh, dims = GPUS[row["gpu"]], _mesh(row), parse_dims(row["dims"])
    if mesh.gpus > mesh.gpus_per_node and FABRICS[row["inter_node"]] is None:
        raise Skip(f"{mesh.gpus} GPUs in nodes of {mesh.gpus_per_node} with inter_node none")
    if row["family"] == "cnn":
        if mesh.dp_shard > 1:
            raise Skip("a ResNet under FSDP: only DDP is modelled for the cnn family")
        step = resnet_step(dims, mesh, gpu)
        if row["metric"] != "images_per_s_total":
            raise Skip(f"{row['metric']} of a ResNet is not modelled (throughput only)")
        return images_per_s(step, mesh), step
    if row["family"] != "transformer":
        raise Skip(f"family {row['family']!r}: the rnn and others have no published-dimension builder")
    try:
        decoder = DecoderDims(**{k: int(dims[k]) for k in ("layers", "width", "heads", "kv_heads", "ffn", "vocab",
                                                           "seq_len")},
                              ffn_kind=dims["ffn_kind"], norm=dims["norm"], positions=dims["positions"])
    except (KeyError, ValueError) as exc:
        raise Skip(f"dims {row['dims']!r}: {exc}") from None
    if mesh.dp > 1:
        raise Skip("a decoder with dp replicas beside FSDP (HSDP) is not modelled")
    step = transformer_step(decoder, mesh, gpu, FABRICS[row["inter_node"]])
    if row["metric"] == "memory_gib_per_gpu":
        return step.memory_bytes / GIB, step
    return mesh.micro_batch * mesh.grad_accum * decoder.seq_len / step.step_s, step


def _strategy(row: dict[str, str]) -> type[Strategy]:
    """The suite's strategy for a row of data parallelism: FSDP where it shards, else DDP."""
    return FSDPStrategy if row.get(DP_SHARD, "1") not in ("", "1") else DistributedDataParallelStrategy


def prediction_records(rows: list[dict[str, str]], source: str) -> list[dict[str, Any]]:
    """One record per row, in the file's order: ``ok`` with the error, or ``skipped`` with the reason."""
    records = []
    for row in rows:
        record: dict[str, Any] = {
            "record_version": RECORD_VERSION, "kind": "prediction", "published_id": row["id"],
            "metric": row["metric"], "published_value": float(row["value"]), "published_source": row.get("source"),
            "published_file": source, "model": row["family"], "preset": row.get("arch"),
            "strategy": _strategy(row).name,
            "device_count": int(row["gpus"]) if row["gpus"].isdigit() else None,
            "global_batch_size": int(row["global_batch"]) if row["global_batch"].isdigit() else None,
            "accelerator": f"{GPUS[row['gpu']].name} (predicted)" if row["gpu"] in GPUS else row["gpu"],
            "precision": row["precision"],
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        # The fields every prediction record carries (bench/commands/predict.py), None where a row has no such figure.
        record |= {key: None for key in ("predicted_step_time_ms", "predicted_samples_per_s", "predicted_compute_ms",
                                         "predicted_exposed_comm_ms", "predicted_update_ms", "predicted_bubble",
                                         "predicted_memory_by_kind", "compute_source")}
        record |= {"notes": [], "predicted_timeline": [], "config": {k: row.get(k) for k in COLUMNS[1:-2]}}
        try:
            value, step = predict_row(row)
        except (Skip, ValueError, KeyError) as exc:
            record |= {"status": "skipped", "reason": str(exc), "predicted_value": None, "error": None}
        else:
            batch = int(row["global_batch"])
            record |= {"status": "ok", "reason": None, "predicted_value": value,
                       "error": value / float(row["value"]) - 1, "predicted_step_time_ms": step.step_s * 1e3,
                       "predicted_samples_per_s": batch / step.step_s, "predicted_compute_ms": step.compute_s * 1e3,
                       "predicted_exposed_comm_ms": step.exposed_comm_s * 1e3,
                       "predicted_update_ms": (step.step_s - step.compute_s - step.exposed_comm_s) * 1e3,
                       "predicted_memory_by_kind": {"total": int(step.memory_bytes)} if step.memory_bytes else None,
                       "predicted_memory_bytes": step.memory_bytes, "efficiencies": step.efficiencies,
                       "compute_source": f"achievable shares of {GPUS[row['gpu']].source}",
                       "notes": list(SHARES[GPUS[row["gpu"]].architecture].sources)}
        records.append(record)
    return records


@dataclass(frozen=True)
class Summary:
    """|error| over the rows predicted, and how many were skipped."""

    median: float | None
    largest: float | None
    predicted: int
    skipped: int


def summarize(records: list[dict[str, Any]]) -> Summary:
    errors = [abs(r["error"]) for r in records if r["status"] == "ok"]
    return Summary(statistics.median(errors) if errors else None, max(errors) if errors else None, len(errors),
                   sum(r["status"] == "skipped" for r in records))


def print_table(records: list[dict[str, Any]]) -> None:
    """One line per row (every value PREDICTED but the published one), then the median and largest |error|."""
    print(f"{'published_id':<34} {'metric':<22} {'published':>10} {'predicted':>10} {'error':>8}")
    for r in records:
        if r["status"] == "ok":
            print(f"{r['published_id']:<34} {r['metric']:<22} {r['published_value']:>10.1f} "
                  f"{r['predicted_value']:>10.1f} {r['error']:>+8.1%}")
        else:
            print(f"{r['published_id']:<34} {r['metric']:<22} {r['published_value']:>10.1f} {'skipped':>10}  "
                  f"{r['reason']}")
    s = summarize(records)
    if s.median is not None:
        print(f"|error| over {s.predicted} rows predicted: median {s.median:.1%}, largest {s.largest:.1%}"
              f"{f'; {s.skipped} skipped' if s.skipped else ''} (predicted values, published measurements)")
    else:
        print(f"no row could be predicted; {s.skipped} skipped")
