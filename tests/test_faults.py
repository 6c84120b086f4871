"""Faults end within a bound, are recorded, and lose no earlier result (BENCH_FAULT, bench/harness/faults.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.harness.records import read_records
from tests.faulty_models import STALLED_MARKER
from tests.helpers.cli import ROOT, BenchRun, run_bench
from tests.helpers.tree import descendants, live

# Beside other tests a run is often disturbed: no second try (tests/helpers/parallel.py).
SWEEP = ["sweep", "--repeats", "1", "--calibration", "none", "--preset", "tiny", "--steps", "2", "--warmup", "1",
         "--no-rerun-disturbed"]


@pytest.mark.launches
def test_out_of_memory_becomes_an_oom_row_with_memory_figures_and_the_next_runs(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    proc = run_bench(*SWEEP, "--strategies", "single", "--devices", "1",
                     "--models", "tests.faulty_models:out_of_memory,mlp", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    oom, ok = read_records(out)[0]
    assert oom["status"] == "oom" and "tried to allocate 64.00 GiB" in oom["reason"]
    assert oom["peak_mem_source"] == "process_peak_rss" and oom["peak_mem_bytes"][0] > 0
    assert ok["status"] == "ok" and ok["model"] == "mlp"
    assert "1 ok, 1 oom" in proc.stdout


@pytest.mark.launches
def test_running_out_of_host_memory_is_one_line_exit_3_and_an_oom_row(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_bench("run", "--strategy", "single", "--model", "tests.faulty_models:host_out_of_memory",
                     "--preset", "tiny", "--steps", "2", "--warmup", "1", "--out", str(out))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("bench run: out of memory on rank 0: RuntimeError: ")
    assert "Traceback" not in proc.stderr
    (row,) = read_records(out)[0]
    assert row["status"] == "oom" and "can't allocate memory" in row["reason"]


@pytest.mark.alone
@pytest.mark.distributed
def test_a_stalled_rank_ends_as_timeout_within_twice_the_timeout(tmp_path: Path, failing_sweep: BenchRun) -> None:
    out = tmp_path / "s.jsonl"
    proc = run_bench(*SWEEP, "--strategies", "ddp", "--devices", "2", "--models", "mlp", "--timeout-s", "4",
                     "--out", str(out), env={"BENCH_FAULT": "1:1:stall"})
    assert proc.returncode == 0, proc.stderr
    (row,) = read_records(out)[0]
    assert row["status"] == "timeout", row["reason"]
    # The child's whole life is torchrun and its workers starting (5-20 s on 2 busy cores), then the
    # healthy rank waiting out the 4 s timeout, and torchrun stopping the stalled one. The start is what a
    # launch that fails in its first forward takes (the failing sweep's first row, timed the same way):
    # what is left, from the stall to the row, must be within twice the timeout.
    started = read_records(failing_sweep.out)[0][0]
    assert started["status"] == "failed"
    assert row["duration_s"] - started["duration_s"] < 2 * 4, (row["duration_s"], started["duration_s"])


@pytest.mark.distributed
def test_a_crashing_rank_becomes_a_failed_row_and_the_sweep_goes_on(failing_sweep: BenchRun) -> None:
    assert failing_sweep.proc.returncode == 0, failing_sweep.proc.stderr
    failed, ok = read_records(failing_sweep.out)[0]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("rank ") and "RuntimeError: injected fault in forward" in failed["reason"]
    assert ok["status"] == "ok" and ok["processes"] == 2


# Not `alone`: its deadlines are minutes, and its sweep re-runs nothing (it passed beside a busy loop on each core).
@pytest.mark.launches
def test_ctrl_c_stops_every_child_keeps_rows_and_the_next_run_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, stalled = tmp_path / "s.jsonl", tmp_path / "stalled"
    args = [*SWEEP, "--strategies", "single", "--devices", "1", "--models", "mlp,tests.faulty_models:stalling,rnn",
            "--out", str(out)]
    # As from a terminal: a runner started in the background (`cmd &`) hands its children SIGINT ignored.
    sweep = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**_env(), "PYTHONPATH": ".", STALLED_MARKER: str(stalled)},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not stalled.exists():  # mlp's row is in and the stalling configuration's child hangs
        assert time.monotonic() < deadline and sweep.poll() is None
        time.sleep(0.2)
    assert out.read_text().count("\n") == 1
    started = descendants(sweep.pid)  # the fork server, the stalling child
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130
    assert "interrupted; completed rows are kept" in err
    assert [r["model"] for r in read_records(out)[0]] == ["mlp"]
    assert len(started) >= 2
    # each dies of its parent's death (a signal the kernel sends): on a busy machine a moment after the sweep
    deadline = time.monotonic() + 20
    while set(started) & set(live()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(started) & set(live()), f"a child outlived the sweep by 20 s: {started}"

    capsys.readouterr()
    assert main([*args, "--dry-run"]) == 0  # the plan starts nothing: read here, not in a fresh interpreter
    plan = capsys.readouterr().out
    states = [line.split()[-1] for line in plan.splitlines()]
    assert states == ["done", "run", "run"], plan + out.read_text()[:3000]


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


@pytest.mark.distributed
def test_with_max_restarts_a_run_that_failed_once_completes_and_records_its_restart(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_bench("run", "--strategy", "ddp", "--devices", "2", "--model", "mlp", "--preset", "tiny",
                     "--steps", "2", "--warmup", "1", "--max-restarts", "1", "--timeout-s", "30", "--out", str(out),
                     env={"BENCH_FAULT": "1:1:raise:once"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "BENCH_FAULT: rank 1 fails at step 1 as asked" in proc.stderr  # the first attempt did fail
    (record,) = read_records(out)[0]
    assert record["status"] == "ok" and record["restart_count"] == 1


def test_benchmarks_default_to_no_restarts() -> None:
    from bench.harness.config import RunConfig
    from bench.harness.launch import torchrun_command

    assert RunConfig().measure.max_restarts == 0
    assert "--max-restarts=0" in torchrun_command(2, ["run"])
