"""Run records: one JSON object per line, appended atomically, read back with every fault named.

Units live in the field names (``step_time_ms``, ``samples_per_s``, ``peak_mem_bytes``), so a
record explains itself without this file.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.attach import prediction_fields
from bench.harness.comm import mean_bytes
from bench.harness.config import RunConfig
from bench.harness.devices import peak_flops_per_s
from bench.harness.disturbance import gpu_tenants, judge, machine_cores
from bench.harness.memory import tracked_steps_name
from bench.harness.runner import RunResult, global_losses, step_times_ms
from strategies.devices import is_emulated

RECORD_VERSION = 1
"""Bumped whenever a field changes meaning or goes away; readers refuse other versions."""


class RecordError(ValueError):
    """A results file that cannot be read as records of this version; the message is one line."""


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Appends ``record`` as one line with a single ``write`` on an ``O_APPEND`` descriptor.

    One write of one line under an exclusive lock means a crash leaves either the whole line
    or, at worst, a torn last line that ``read_records`` reports by number; earlier lines are
    never rewritten.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size and not _ends_with_newline(fd):
            # A killed writer left a torn line: start ours on a fresh line so it stays readable.
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_with_newline(fd: int) -> bool:
    return os.pread(fd, 1, os.fstat(fd).st_size - 1) == b"\n"


def amend_newest(path: str | Path, matches: Callable[[dict[str, Any]], bool],
                 amend: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """Replaces the newest record of ``path`` with ``amend(record)`` where ``matches(record)``; False (and nothing
    written) where the newest line is another's, or unreadable.

    For what a writer learns only after the record is written (the sweep's canary, timed once the run has
    ended), where nothing else writes ``path`` meanwhile (a sweep between its runs). The file is written whole to
    a temporary beside it and renamed over it: a crash leaves the old file or the new one, every earlier line as
    it was."""
    path = Path(path)
    if not path.exists():
        return False
    lines = path.read_bytes().splitlines(keepends=True)
    try:
        record = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return False
    if not isinstance(record, dict) or not matches(record):
        return False
    temporary = path.with_name(path.name + ".amending")
    with temporary.open("wb") as out:
        out.write(b"".join(lines[:-1]) + (json.dumps(amend(record), sort_keys=True) + "\n").encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return True


@dataclass(frozen=True)
class BadLine:
    """A line of a results file that is not a readable record."""

    line_number: int
    reason: str


def read_records(path: str | Path) -> tuple[list[dict[str, Any]], list[BadLine]]:
    """All readable records of ``path`` and, separately, each unreadable line with its number.

    Raises RecordError only when the file itself cannot be read, or holds records of another
    format version (whose fields this code would misread).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RecordError(f"cannot read results file {path}: {exc.strerror}") from None
    records: list[dict[str, Any]] = []
    bad: list[BadLine] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(BadLine(number, f"not valid JSON ({exc.msg}); a run killed while writing?"))
            continue
        if not isinstance(record, dict) or "record_version" not in record:
            bad.append(BadLine(number, "not a run record (no record_version)"))
            continue
        if record["record_version"] != RECORD_VERSION:
            raise RecordError(
                f"{path}:{number} holds a version-{record['record_version']} record; this suite reads version "
                f"{RECORD_VERSION}. Write new results to another file"
            )
        records.append(record)
    return records, bad


def build_record(config: RunConfig, result: RunResult, env: dict[str, Any]) -> dict[str, Any]:
    """The record of a finished run, from every rank's figures."""
    topo = result.topology
    times_ms = step_times_ms(result.ranks)
    median_ms = statistics.median(times_ms)
    q1, _, q3 = statistics.quantiles(times_ms, n=4) if len(times_ms) > 1 else (median_ms, 0, median_ms)
    samples_per_s = config.run.global_batch / (median_ms / 1e3)
    losses = global_losses(result.ranks)
    flops = result.flops_per_sample
    achieved = flops * samples_per_s if flops else None
    peak: float | None
    peak_source: str | None
    if config.measure.peak_tflops:
        peak, peak_source = config.measure.peak_tflops * 1e12, "--peak-tflops"
    else:
        peak = peak_flops_per_s(topo.devices[0], config.run.precision)
        peak_source = "data sheet" if peak else None
    cores = os.cpu_count() or 1
    return {
        "record_version": RECORD_VERSION,
        "status": "ok",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "strategy": config.strategy,
        "model": config.workload.model,
        "preset": config.workload.preset,
        "accelerator": config.run.accelerator,
        "device_count": topo.device_count,
        "processes": topo.world_size,
        "emulated": topo.emulated,
        "oversubscribed": config.run.accelerator == "cpu" and topo.world_size > cores,
        "threads_per_process": [r.threads for r in result.ranks],
        "global_batch_size": config.run.batch_size,
        "precision": config.run.precision,
        "skipped_steps": max(r.skipped_steps for r in result.ranks),
        "config": config.as_dict(),
        "step_times_ms": times_ms,
        "step_time_ms_median": median_ms,
        "step_time_ms_iqr": q3 - q1,
        "samples_per_s": samples_per_s,
        "samples_per_s_per_device": samples_per_s / topo.device_count,
        "peak_mem_bytes": [b for r in result.ranks for b in r.peak_mem_bytes],
        "peak_mem_source": result.ranks[0].peak_mem_source,
        **_memory_by_kind(result, config.run.warmup),
        # what each rank handed to gloo/NCCL in its last warm-up step (bench/harness/comm.py); None: not counted
        "comm_bytes_per_step": [r.comm_bytes for r in result.ranks],
        "comm_bytes_per_step_mean": mean_bytes([r.comm_bytes for r in result.ranks]),
        # --profile: each rank's torch.profiler trace; those steps carry the profiler's overhead.
        "profile_traces": [r.trace for r in result.ranks if r.trace] or None,
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "flops_per_sample": flops,
        "achieved_flops_per_s": achieved,
        "peak_flops_per_s_per_device": peak,
        "peak_flops_source": peak_source,
        "mfu": achieved / (peak * topo.device_count) if achieved and peak else None,
        "strategy_fields": result.strategy_fields,
        "deterministic": config.knobs.deterministic,
        **_machine_account(result),
        # torchrun counts its restarts; each worker of the final attempt sees the count.
        "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        # bench sweep's prediction of this run, when it made one: labelled, with its error.
        **prediction_fields(median_ms),
        "env": env,
    }


def _memory_by_kind(result: RunResult, warmup: int) -> dict[str, Any]:
    """Every rank's peak bytes by kind over the warm-up steps it tracked (bench/harness/memory.py), in rank order."""
    tracked = [{"rank": r.rank, **device} for r in result.ranks for device in (r.memory_by_kind or [])]
    errors = sorted({r.memory_error for r in result.ranks if r.memory_error})
    trackers = sorted({str(d.get("tracker")) for d in tracked})
    step = tracked_steps_name(warmup)
    source = f"torch {', '.join(trackers)}, {step}" if tracked else "; ".join(errors) or None
    return {"memory_by_kind": tracked or None, "memory_by_kind_source": source}


def _machine_account(result: RunResult) -> dict[str, Any]:
    """``disturbed`` and its reason, and what the ranks saw of the machine (bench/harness/disturbance.py)."""
    loads = [r.load for r in result.ranks if r.load is not None]
    cuda = result.topology.devices[0].type == "cuda"
    tenants = gpu_tenants({r.pid for r in result.ranks}) if cuda else 0
    return judge(loads, machine_cores(), tenants).record_fields(loads)


def failure_record(
    config: RunConfig,
    status: str,
    reason: str,
    env: dict[str, Any],
    duration_s: float = 0.0,
    peak_mem: tuple[list[int], str] | None = None,
) -> dict[str, Any]:
    """The row of a configuration that measured nothing: ``skipped``, ``failed``, ``timeout`` or ``oom``."""
    row = {
        "record_version": RECORD_VERSION,
        "status": status,
        "reason": reason,
        "duration_s": duration_s,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "strategy": config.strategy,
        "model": config.workload.model,
        "preset": config.workload.preset,
        "accelerator": config.run.accelerator,
        "device_count": config.run.devices,
        "global_batch_size": config.run.batch_size,
        "precision": config.run.precision,
        "emulated": is_emulated(config.run.accelerator, config.run.devices),
        "config": config.as_dict(),
        "env": env,
    }
    if peak_mem is not None:
        row["peak_mem_bytes"], row["peak_mem_source"] = peak_mem
    return row
