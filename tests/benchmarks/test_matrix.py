"""Benchmarks of every strategy x model x device count, timed by pytest-benchmark.

In-process strategies are timed step by step inside this process (``test_step``). Strategies
with one process per device run under torchrun from the test (``test_torchrun_launch``): the
fixture then times the whole launch, once, and the per-step figures come from the run's own
record in ``extra_info``. Every case's ``extra_info['record']`` is a full run record, which
``python -m bench report`` reads from the ``--benchmark-json`` file.
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from bench.harness.cli_args import config_to_argv
from bench.harness.config import resolve
from bench.harness.environment import environment
from bench.harness.launch import child_command
from bench.harness.records import build_record, read_records
from bench.harness.runner import RankStats, RunResult, prepared_run
from models.data import global_batches
from strategies import ConfigError, build_strategy
from strategies.devices import peak_memory, reset_peak_memory
from tests.helpers.equivalence import assert_matches_reference, reference
from tests.helpers.matrix import Case, base_config
from tests.helpers.ranks import merged_state, run_ranks_sequence

EXTRA_FIELDS = ("samples_per_s", "step_time_ms_median", "step_time_ms_iqr", "peak_mem_bytes", "peak_mem_source",
                "device_count", "processes", "emulated", "mfu")


def _resolved(case: Case, steps: int, warmup: int, out: Path):  # noqa: ANN202
    try:
        return resolve(base_config(case, steps, warmup, str(out)))
    except ConfigError as exc:  # the matrix planned what bench refuses: a bug in one of the two
        pytest.fail(f"the matrix planned {case.id}, which bench refuses: {exc}", pytrace=False)


def _finish(benchmark, case: Case, record: dict, single_throughput: dict) -> None:  # noqa: ANN001
    key = (case.model, case.preset)
    if case.strategy == "single":
        single_throughput[key] = record["samples_per_s"]
    base = single_throughput.get(key)
    efficiency = record["samples_per_s"] / (base * record["device_count"]) if base else None
    benchmark.extra_info.update({k: record[k] for k in EXTRA_FIELDS}, scaling_efficiency=efficiency, record=record)


def test_step(benchmark, case: Case, bench_options: dict, single_throughput: dict, tmp_path: Path) -> None:  # noqa: ANN001
    """Times one optimizer step (forward, backward, optimizer, devices synchronized) of an in-process strategy."""
    steps, warmup = (bench_options["steps"], bench_options["warmup"]) if bench_options["enabled"] else (1, 0)
    config = _resolved(case, steps, warmup, tmp_path / "r.jsonl")
    losses: list[float] = []
    strategy = build_strategy(config.strategy, config)
    run = prepared_run(config, strategy, strategy.local_topology())
    shards = itertools.cycle(
        [strategy.shard_batch(x, y, run.topology) for x, y in global_batches(run.dataset, config.run.batch_size, 4)]
    )

    def next_shard() -> tuple[tuple, dict]:  # outside the clock, like the runner's sharding
        return next(shards), {}

    def step(inputs, targets) -> None:  # noqa: ANN001
        loss = run.step(inputs, targets)
        losses.append(float(loss))

    benchmark.group = f"{case.model}/{case.preset}"  # read when the timing starts
    # Cases share this process: each case's peak starts from its own model, not the cases before it.
    reset_peak_memory(run.topology.devices)
    benchmark.pedantic(step, setup=next_shard, rounds=steps, warmup_rounds=warmup, iterations=1)
    stats = RankStats(rank=0, threads=0, losses=losses)
    stats.step_times_s = list(benchmark.stats.stats.data) if benchmark.stats else []
    stats.peak_mem_bytes, stats.peak_mem_source = peak_memory(run.topology.devices)
    stats.strategy_fields = strategy.rank_fields(run.model, run.topology)
    fields = strategy.record_fields(run.model, [stats.strategy_fields])
    result = RunResult(run.topology, [stats], run.flops_per_sample, fields)
    assert len(losses) == steps + warmup and all(loss == loss for loss in losses)  # trained, no NaN
    if stats.step_times_s:
        _finish(benchmark, case, build_record(config, result, environment()), single_throughput)


@pytest.mark.launches
def test_torchrun_launch(benchmark, case: Case, bench_options: dict, single_throughput: dict, tmp_path: Path) -> None:  # noqa: ANN001
    """Times a whole torchrun launch of a one-process-per-device strategy; per-step figures in extra_info."""
    if not bench_options["enabled"]:
        pytest.skip("torchrun launches are timed with --benchmark; without it, test_per_device_cases_train runs "
                    "each one-process-per-device strategy at the tiny preset (hybrid: tests/test_hybrid.py), and "
                    "tests/test_benchmark_flag.py times a launch")
    out = tmp_path / "r.jsonl"
    config = _resolved(case, bench_options["steps"], bench_options["warmup"], out)
    command, env = child_command(["run", *config_to_argv(config)])

    def launch() -> None:
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=config.measure.timeout_s + 120)

    benchmark.group = f"{case.model}/{case.preset}"  # read when the timing starts
    benchmark.pedantic(launch, rounds=1, iterations=1)
    (record,) = read_records(out)[0]
    assert record["status"] == "ok" and record["processes"] == case.devices
    _finish(benchmark, case, record, single_throughput)


PER_DEVICE_CASES = [Case(name, "mlp", 2, "tiny", "fp32") for name in ("ddp", "zero1", "fsdp", "tp", "pp")]
"""Each one-process-per-device strategy of the matrix once, on 2 ranks (hybrid needs 4: tests/test_hybrid.py)."""


@pytest.mark.distributed
def test_per_device_cases_train(bench_options: dict, tmp_path: Path) -> None:
    """The matrix's own configurations of the torchrun strategies, in one 2-rank process group instead of
    five launches (12-15 s each on 2 cores): each trains like single and makes a full record."""
    if bench_options["enabled"]:
        pytest.skip("with --benchmark, test_torchrun_launch launches every one of them")
    configs = [_resolved(case, 2, 1, tmp_path / "r.jsonl") for case in PER_DEVICE_CASES]
    env = environment()
    for case, config, results in zip(PER_DEVICE_CASES, configs, run_ranks_sequence(configs, 2, tmp_path),
                                     strict=True):
        record = build_record(config, results[0], env)
        assert (record["strategy"], record["processes"], record["device_count"]) == (case.strategy, 2, 2)
        assert len(record["losses"]) == 3 and len(record["step_times_ms"]) == 2 and record["samples_per_s"] > 0
        # The matrix's configuration is one the equivalence checks hold: same losses and weights as single.
        assert_matches_reference(record["losses"], merged_state(results), reference(config))
