"""Fixtures shared by the tests (helpers to import live in tests/helpers/)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.harness.allocator import keep_freed_memory
from tests.helpers.cli import BenchRun, run_bench
from tests.helpers.records import FAILED, RECORDS, VERIFY

keep_freed_memory()  # the tests' own steps, as every process the suite starts (bench/harness/allocator.py)

TINY_MLP = ("--model", "mlp", "--preset", "tiny", "--devices", "2")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results.jsonl"


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    """The report's fixed sweep (tests/helpers/records.py) with a failed run, verify's rows and a torn line 4."""
    path = tmp_path / "sweep.jsonl"
    lines = [json.dumps(r) for r in [*RECORDS, FAILED, *VERIFY]]
    lines.insert(3, '{"record_version": 1, "status": "ok", "strat')  # a torn line: line 4
    path.write_text("\n".join(lines) + "\n")
    return path


# A torchrun launch costs 12-15 s on 2 cores; each of these is launched once for every test that reads it.

@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """``bench run --strategy ddp --devices 2`` on the tiny mlp, 3 timed steps."""
    return _bench_run(tmp_path_factory.mktemp("ddp-run") / "results.jsonl",
                      "--strategy", "ddp", "--steps", "3", "--warmup", "1")


@pytest.fixture(scope="session")
def pp_run(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """``bench run --strategy pp --devices 2 --microbatches 4`` on the tiny mlp, 3 timed steps."""
    return _bench_run(tmp_path_factory.mktemp("pp-run") / "results.jsonl",
                      "--strategy", "pp", "--microbatches", "4", "--steps", "3", "--warmup", "1")


@pytest.fixture(scope="session")
def crashing_ddp_run(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """ddp on 2 ranks whose rank 1 raises at step 2 of 50; its output folder is named uniquely, so that a
    worker that outlived the run can be found by it."""
    out = tmp_path_factory.mktemp(f"crash-{time.monotonic_ns()}") / "results.jsonl"
    return _bench_run(out, "--strategy", "ddp", "--steps", "50", "--warmup", "1", "--timeout-s", "30",
                      env={"BENCH_FAULT": "1:2:raise"}, timeout=180)


@pytest.fixture(scope="session")
def failing_sweep(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """``bench sweep`` of ddp on 2 ranks over a model that raises in its forward, then the tiny mlp."""
    return _timed(tmp_path_factory.mktemp("failing-sweep") / "s.jsonl", "sweep", "--repeats", "1", "--calibration",
                  "none", "--preset", "tiny", "--steps", "2", "--warmup", "1", "--strategies", "ddp", "--devices", "2",
                  "--models", "tests.faulty_models:raising,mlp", "--no-rerun-disturbed")


def _bench_run(out: Path, *args: str, **options: object) -> BenchRun:
    return _timed(out, "run", *TINY_MLP, *args, **options)


def _timed(out: Path, *args: str, **options: object) -> BenchRun:
    """``python -m bench ARGS --out OUT``, timed."""
    start = time.monotonic()
    proc = run_bench(*args, "--out", str(out), **options)  # type: ignore[arg-type]
    return BenchRun(proc, out, time.monotonic() - start)
