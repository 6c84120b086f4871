"""A strategy defined entirely in this module reaches every command, with no other file edited.

``ddp1`` is DistributedDataParallel with all of its gradients in one bucket (one all-reduce after the whole
backward, nothing overlapped), with its own cost model. It joins the registry through
``$BENCH_STRATEGY_MODULES`` (strategies/__init__.py), which the processes torchrun starts inherit, and is then
listed, validated, run, swept, verified, predicted and reported like the strategies the suite ships.
The harness is imported inside the tests: the processes import this module while the harness is loading.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import strategies
from strategies import PLUGINS_VARIABLE, ConfigError, register
from strategies.cost_model import FP32, CostSource, Scenario, StepPrediction, own_overhead, threads_per_process
from strategies.ddp import DataParallelCost, DistributedDataParallelStrategy
from strategies.options import BucketOptions, DDPOptions, RunOptions

ONE_BUCKET_MB = 2.0**20
"""A bucket cap no model here reaches: every gradient waits for the whole backward, in one all-reduce."""


class OneBucketCost(DataParallelCost):
    """The forward and the whole backward, then one all-reduce of every gradient (none of it hidden)."""

    residual = None  # no reference run of its own: it pays ddp's runtime term, measured on ddp

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        n = scenario.devices
        threads = threads_per_process(n)
        blocks, slow = costs.blocks(threads), costs.slowdown_for(n)
        samples = scenario.global_batch / n
        compute = (sum(b.forward_ms.at(samples) + b.backward_ms.at(samples) for b in blocks)
                   + own_overhead(costs, threads, samples)) * slow
        parameters = sum(b.parameters for b in blocks)
        exposed = (costs.collective_ms("all_reduce", FP32 * parameters, n)
                   + costs.runtime_for(n, scenario.global_batch)["ddp_per_step"])
        update = costs.optimizer_ms(threads, parameters) * slow
        return StepPrediction(compute + exposed + update, compute, exposed, update)


class OneBucketDDP(DistributedDataParallelStrategy):
    """DDP whose gradients travel in one bucket, after the backward."""

    name = "ddp1"
    description = "test-only: DistributedDataParallel with one gradient bucket"
    cost_model = OneBucketCost()

    def __init__(self, run: RunOptions, *, buckets: BucketOptions, ddp: DDPOptions) -> None:
        super().__init__(run, buckets=dataclasses.replace(buckets, bucket_cap_mb=ONE_BUCKET_MB), ddp=ddp)


MODULE = "tests.test_strategy_plugin"
"""This module as the processes a command starts import it (from the repository root)."""
STRATEGIES = (OneBucketDDP,)
"""What strategies.load_plugins registers from this module."""


@pytest.fixture
def plugged(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """``ddp1`` registered here and in every process a command starts (its environment names this module)."""
    monkeypatch.setenv(PLUGINS_VARIABLE, MODULE)
    monkeypatch.setitem(strategies.STRATEGIES, OneBucketDDP.name, OneBucketDDP)
    yield {PLUGINS_VARIABLE: MODULE}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_name_already_registered_is_refused() -> None:
    class Impostor(OneBucketDDP):
        name = "ddp"

    with pytest.raises(ConfigError, match="'ddp' is taken"):
        register(Impostor)


def test_it_is_listed_and_its_bad_input_refused_in_one_line(plugged: dict[str, str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main
    from tests.helpers.cli import run_in_process

    main(["list"])
    assert "ddp1" in capsys.readouterr().out
    code, err = run_in_process(capsys, "run", "--strategy", "ddp1", "--devices", "2", "--batch-size", "7",
                               "--model", "mlp", "--preset", "tiny")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--batch-size 7" in err


def test_it_is_predicted_by_its_own_cost_model(plugged: dict[str, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    out = tmp_path / "what_if.jsonl"
    main(["predict", "--hardware", "h200", "--strategies", "ddp,ddp1", "--devices", "8", "--model", "transformer",
          "--preset", "large", "--out", str(out)])
    steps = {r["strategy"]: r["predicted_step_time_ms"] for r in _rows(out)}
    # One bucket after the backward hides nothing: never faster than ddp's overlapped buckets.
    assert steps["ddp1"] >= steps["ddp"] > 0


@pytest.mark.launches
def test_it_is_swept_verified_and_reported(plugged: dict[str, str], tmp_path: Path) -> None:
    from tests.helpers.cli import run_bench

    runs, checks, report = tmp_path / "runs.jsonl", tmp_path / "verify.jsonl", tmp_path / "report"
    swept = run_bench("sweep", "--strategies", "ddp1", "--models", "mlp", "--devices", "2",
                      "--preset", "tiny", "--steps", "3", "--warmup", "1", "--repeats", "1", "--calibration", "none",
                      "--no-rerun-disturbed", "--out", str(runs), env=plugged)
    assert swept.returncode == 0, swept.stderr[-2000:]
    ran = [r for r in _rows(runs) if r.get("strategy") == "ddp1"]
    assert [(r["status"], r["device_count"], r["strategy_fields"]["bucket_cap_mb"]) for r in ran] == [
        ("ok", 2, ONE_BUCKET_MB)]
    verified = run_bench("verify", "--strategies", "ddp1", "--models", "mlp", "--out", str(checks), env=plugged)
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert [r["passed"] for r in _rows(checks) if r.get("strategy") == "ddp1"] == [True]
    reported = run_bench("report", str(runs), str(checks), "--out", str(report), env=plugged)
    assert reported.returncode == 0, reported.stderr[-2000:]
    assert "ddp1" in (report / "report.md").read_text()
