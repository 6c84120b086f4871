"""One measured run, end to end: the CLI in a subprocess, the record's schema (the runner itself: test_runner.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.cli import main
from bench.harness.allocator import KEPT
from bench.harness.records import RECORD_VERSION, read_records
from tests.helpers.cli import run_bench

RECORD_FIELDS = {
    "record_version", "status", "timestamp", "strategy", "model", "preset", "accelerator", "device_count",
    "processes", "emulated", "oversubscribed", "threads_per_process", "global_batch_size", "config",
    "step_times_ms", "step_time_ms_median", "step_time_ms_iqr", "samples_per_s", "samples_per_s_per_device",
    "peak_mem_bytes", "peak_mem_source", "losses", "loss_first", "loss_last", "flops_per_sample",
    "achieved_flops_per_s", "peak_flops_per_s_per_device", "mfu", "strategy_fields", "env", "deterministic",
    "restart_count", "precision", "peak_flops_source", "skipped_steps", "memory_by_kind", "memory_by_kind_source",
    "comm_bytes_per_step", "comm_bytes_per_step_mean",
    "disturbed", "disturbed_reason", "machine_load", "profile_traces",
}
ENV_FIELDS = {
    "torch", "cuda", "cudnn", "nccl", "gpu_names", "gpu_count", "cpu_model", "cpu_cores", "threads",
    "hostname", "python", "git_commit", "git_dirty", "topology", "device_memory_bytes", "allocator",
}


@pytest.mark.parametrize("model", [pytest.param("mlp", marks=pytest.mark.launches), "cnn", "rnn", "transformer"])
def test_bench_run_appends_one_valid_record(model: str, results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--model", model, "--preset", "tiny", "--steps", "3", "--warmup", "1", "--out", str(results)]
    if model == "mlp":  # one in a process of its own, as a user types it; the others here (2 s of start each)
        proc = run_bench(*args)
        assert proc.returncode == 0, proc.stderr
        printed = proc.stdout
    else:
        assert main(args) == 0
        printed = capsys.readouterr().out
    assert f"single {model}/tiny on 1 cpu device(s)" in printed
    records, bad = read_records(results)
    assert bad == [] and len(records) == 1
    record = records[0]
    assert set(record) == RECORD_FIELDS
    assert set(record["env"]) == ENV_FIELDS
    assert record["env"]["allocator"] == KEPT  # set where python -m bench starts, or inherited from the fork server
    assert record["record_version"] == RECORD_VERSION and record["status"] == "ok"
    assert len(record["step_times_ms"]) == 3 and len(record["losses"]) == 4  # warm-up loss kept, not timed
    assert min(record["step_times_ms"]) <= record["step_time_ms_median"] <= max(record["step_times_ms"])
    expected_rate = record["global_batch_size"] / (record["step_time_ms_median"] / 1e3)
    assert math.isclose(record["samples_per_s"], expected_rate)
    assert record["loss_first"] == record["losses"][0] and record["loss_last"] == record["losses"][-1]
    assert record["peak_mem_source"] == "process_peak_rss" and record["peak_mem_bytes"][0] > 10 * 2**20
    assert record["flops_per_sample"] > 0
    assert record["achieved_flops_per_s"] == pytest.approx(record["flops_per_sample"] * record["samples_per_s"])
    assert record["mfu"] is None  # no known peak for a CPU
    assert record["emulated"] is False and record["device_count"] == 1
    assert record["deterministic"] is False and record["restart_count"] == 0  # benchmark mode says so
    assert record["config"]["batch_size"] == 8 and record["config"]["accelerator"] == "cpu"
    assert record["memory_by_kind"][0]["parameters"] > 0 and isinstance(record["disturbed"], bool)


def test_list_names_strategies_models_presets_and_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    for word in ("single", "mlp", "cnn", "rnn", "transformer", "tiny", "small", "large", "GPU(s)", "cores"):
        assert word in printed
