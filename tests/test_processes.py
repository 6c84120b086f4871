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

STALL_FOREVER = {"BENCH_FAULT": "1:0:stall"}


def _live() -> dict[int, tuple[int, str]]:
    """Each live process (zombies do not count): its parent and its command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state, parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            found[int(proc.name)] = (int(parent), command)
    return found


def _alive(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker``."""
    return [command for _, command in _live().values() if marker in command]


def _descendants(pid: int) -> dict[int, str]:
    """The live Python processes below ``pid``, by pid: their command lines."""
    live = _live()
    found: dict[int, str] = {}
    grew = True
    while grew:
        below = {p: c for p, (parent, c) in live.items() if (parent == pid or parent in found) and "python" in c}
        grew = len(below) > len(found)
        found = below
    return found


def _wait_for(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s"
        time.sleep(0.2)


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.launches
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_started_through_processes_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    marker = f"sleeper-{tmp_path.name}"
    parent = _start(["-c", "import sys, time; from bench.harness import processes; "
                           f"processes.start([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}']); "
                           "time.sleep(600)"])
    _wait_for(lambda: len(_alive(marker)) == 1, 30, "the child started")
    parent.kill()
    parent.wait()
    _wait_for(lambda: not _alive(marker), 10, "the child died with its parent")


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
    # Below bench run (torchrun's agent inside it): the fork server and two workers; below a sweep, bench run too.
    processes = 3 if command == "run" else 4
    _wait_for(lambda: len(_descendants(bench.pid)) >= processes, 120, "the workers started")
    started = _descendants(bench.pid)
    bench.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel must do it
    bench.wait()

    def left() -> dict[int, str]:
        return {pid: line for pid, line in started.items() if pid in _live()}

    _wait_for(lambda: not left(), 20, f"no process of the run left ({left()})")
