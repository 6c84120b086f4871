"""A run knows when the machine was not its own (bench/disturbance.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.disturbance import FOREIGN_SHARE_LIMIT, RankLoad, judge
from bench.records import read_records
from tests.helpers.cli import run_bench


def load(host: str = "a", wall_s: float = 2.0, own_cpu_s: float = 1.0, machine_busy_s: float | None = 1.2) -> RankLoad:
    return RankLoad(host, wall_s, own_cpu_s, machine_busy_s, load_before=1.0, load_after=1.5)


@pytest.mark.parametrize(
    ("loads", "disturbed", "share"),
    [
        ([load(own_cpu_s=1.0, machine_busy_s=1.2)], False, 0.05),  # 0.2 s of others' CPU over 2 cores x 2 s
        ([load(own_cpu_s=1.0, machine_busy_s=2.6)], True, 0.4),
        # Two ranks on one host: both ranks' own CPU is the run's, not foreign.
        ([load(own_cpu_s=1.5, machine_busy_s=3.2), load(own_cpu_s=1.5, machine_busy_s=3.0)], False, 0.05),
        # Two hosts: the worse one decides.
        ([load("a", machine_busy_s=1.0), load("b", machine_busy_s=3.0)], True, 0.5),
        ([load(wall_s=0.2, machine_busy_s=0.4)], False, None),  # too short for 10 ms ticks: not judged
        ([load(machine_busy_s=None)], False, None),  # no /proc/stat
    ],
)
def test_the_verdict_subtracts_the_runs_own_cpu_from_the_machines(
    loads: list[RankLoad], disturbed: bool, share: float | None
) -> None:
    verdict = judge(loads, cores=2)
    assert verdict.disturbed is disturbed
    assert verdict.foreign_cpu_share == (None if share is None else pytest.approx(share))
    if disturbed:
        assert "of the 2 cores during the run (load average 1.0 -> 1.5)" in verdict.reason


def test_a_judge_that_forgot_the_runs_own_cpu_would_flag_every_busy_run() -> None:
    # The deliberately broken variant: counting the machine's busy time alone as foreign.
    quiet_but_busy = [load(own_cpu_s=3.8, machine_busy_s=3.9)]
    assert not judge(quiet_but_busy, cores=2).disturbed
    broken_share = quiet_but_busy[0].machine_busy_s / (2 * quiet_but_busy[0].wall_s)
    assert broken_share > FOREIGN_SHARE_LIMIT  # what the broken variant would have concluded


def test_other_processes_on_the_gpus_disturb_a_run() -> None:
    verdict = judge([load()], cores=2, gpu_tenants=1)
    assert verdict.disturbed and verdict.reason == "1 other process(es) computed on its GPUs"


def test_a_run_beside_a_cpu_hog_is_flagged(tmp_path: Path) -> None:
    hog = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]  # both cores
    try:
        out = tmp_path / "r.jsonl"
        proc = run_bench("run", "--strategy", "single", "--model", "mlp", "--preset", "tiny", "--steps", "20",
                         "--out", str(out))
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = read_records(out)[0]
    assert record["disturbed"] is True, record["machine_load"]
    assert "other processes used" in record["disturbed_reason"]
    assert record["machine_load"]["foreign_cpu_share"] > FOREIGN_SHARE_LIMIT
