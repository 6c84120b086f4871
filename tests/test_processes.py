"""No process the suite starts outlives the one that started it, however that one ends (bench/harness/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT
from tests.helpers.tree import descendants, live

STALL_FOREVER = {"BENCH_FAULT": "1:0:stall"}


def _wait_for(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s"
        time.sleep(0.2)


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.distributed
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_killing_bench_leaves_no_torchrun_and_no_worker(command: str, tmp_path: Path) -> None:
    out = tmp_path / f"{command}-left-behind.jsonl"
    what = ["--strategy", "ddp"] if command == "run" else ["--strategies", "ddp", "--models", "mlp",
                                                           "--calibration", "none"]
    bench = _start(["-m", "bench", command, *what, "--devices", "2", "--model" if command == "run" else "--preset",
                    "mlp" if command == "run" else "tiny", "--out", str(out)],
                   # what a killed bench cannot remove (its failure notes' folder) stays in the test's own folder
                   env={**STALL_FOREVER, "TMPDIR": str(tmp_path)})
    # Below bench run (torchrun's agent inside it): two workers, forked from it; below a sweep, its fork server and
    # bench run too.
    processes = 2 if command == "run" else 4
    _wait_for(lambda: len(descendants(bench.pid)) >= processes, 120, "the workers started")
    started = descendants(bench.pid)
    bench.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel must do it
    bench.wait()

    def left() -> dict[int, str]:
        return {pid: line for pid, line in started.items() if pid in live()}

    _wait_for(lambda: not left(), 20, f"no process of the run left ({left()})")


def test_stop_reaches_a_child_that_has_no_process_group_of_its_own_yet() -> None:
    """A child forked from the fork server makes its session a moment after it starts: stopped before, the
    signal goes to it alone (without that it would run its whole course, here 30 s, and end 0)."""
    from bench.harness import processes

    child = subprocess.Popen(["sleep", "30"])  # in our own process group, as a forked child is at first
    start = time.monotonic()
    processes.stop(child, grace_s=5)
    assert child.returncode == -signal.SIGTERM and time.monotonic() - start < 5
