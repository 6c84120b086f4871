"""A failed run ends in one line naming the rank that failed first, its step and its error
(bench/harness/failures.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.harness.failures import (
    FAILURE_DIR_VARIABLE,
    LaunchFailure,
    RankFailure,
    note_failure,
    note_step,
    read_failures,
)
from bench.harness.records import read_records
from tests.helpers.cli import BenchRun

RAISED = RankFailure(1, 2, "RuntimeError: injected", time_s=10.0)
PEER_LEFT = RankFailure(0, 2, "RuntimeError: [pair.cc:547] Connection closed by peer [127.0.0.1]:1", time_s=10.5)
TIMED_OUT = RankFailure(0, 1, "RuntimeError: [unbound_buffer.cc:129] Timed out waiting 10000ms for send", time_s=20.0)
OOM = RankFailure(1, 0, "OutOfMemoryError: tried to allocate 64.00 GiB", time_s=11.0)

LINES = [
    # The cause first, whatever order the notes were read in; the echo after it.
    ([PEER_LEFT, RAISED], [], "failed",
     "rank 1 failed at step 2: RuntimeError: injected; rank 0 stopped because its peer left (at step 2)"),
    # A stalled rank leaves no note (torchrun kills it); its peer waited out the timeout.
    ([TIMED_OUT], [1], "timeout",
     "rank 1 ended without a Python error (a crash, a kill or a stall; on Linux the kernel's out-of-memory killer "
     "also ends a process this way; the launcher's exit codes are in the output); "
     "rank 0 timed out waiting for its peers at step 1: RuntimeError: [unbound_buffer.cc:129] Timed out waiting "
     "10000ms for send"),
    ([OOM, PEER_LEFT], [], "oom",
     "rank 1 failed at step 0: OutOfMemoryError: tried to allocate 64.00 GiB; rank 0 stopped because its peer left "
     "(at step 2)"),
    ([RankFailure(0, None, "ValueError: bad", 1.0)], [], "failed", "rank 0 failed during set-up: ValueError: bad"),
    ([], [0, 1], "failed", "ranks 0 and 1 ended without a Python error (a crash, a kill or a stall; on Linux the "
     "kernel's out-of-memory killer also ends a process this way; the launcher's exit codes are in the output)"),
    # The CPU allocator's failed malloc is out of memory too.
    ([RankFailure(0, 1, "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                  "allocate memory: you tried to allocate 1125899906842624 bytes.", 1.0)], [], "oom",
     "rank 0 failed at step 1: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
     "can't allocate memory: you tried to allocate 1125899906842624 bytes."),
]


@pytest.mark.parametrize(("failures", "vanished", "status", "line"), LINES)
def test_the_line_puts_the_cause_first(failures: list, vanished: list, status: str, line: str) -> None:
    ended = LaunchFailure(failures, vanished)
    assert ended.line() == line
    assert ended.status == status


def test_notes_round_trip_through_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAILURE_DIR_VARIABLE, str(tmp_path))
    for rank in range(3):
        (tmp_path / f"rank{rank}.started").touch()
    (tmp_path / "rank2.done").touch()
    error = RuntimeError("injected\nsecond line")
    note_step(error, 4)
    note_step(error, 5)  # the innermost step is the one it was raised in
    note_failure(1, error)
    ended = read_failures(tmp_path)
    assert [(f.rank, f.step, f.error) for f in ended.failures] == [(1, 4, "RuntimeError: injected")]
    assert ended.vanished == [0]


def test_a_note_cut_off_as_its_rank_was_stopped_leaves_that_rank_vanished(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # CI once read an empty rank note (its rank stopped while writing it) and the whole sweep ended on a traceback
    monkeypatch.setenv(FAILURE_DIR_VARIABLE, str(tmp_path))
    for rank in range(2):
        (tmp_path / f"rank{rank}.started").touch()
    note_failure(0, RuntimeError("injected"))
    (tmp_path / "rank1.json").write_text("")
    ended = read_failures(tmp_path)
    assert [f.rank for f in ended.failures] == [0] and ended.vanished == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank0.started", "rank1.json", "rank1.started"]


def test_outside_a_launch_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAILURE_DIR_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    note_failure(0, RuntimeError("x"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.distributed
def test_bench_run_ends_with_the_line_of_the_rank_that_failed_first(crashing_ddp_run: BenchRun) -> None:
    proc = crashing_ddp_run.proc
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("bench run: rank 1 failed at step 2: RuntimeError: BENCH_FAULT: rank 1 fails at step"), last
    # Rank 0 either noticed its peer leave or was stopped by torchrun first; either way it comes after.
    assert "rank 0 " in last.split("as asked", 1)[1], last
    assert "Traceback" in proc.stderr  # the whole story is still above the line


@pytest.mark.distributed
def test_a_sweep_row_carries_the_same_line_and_keeps_the_whole_log(failing_sweep: BenchRun) -> None:
    assert failing_sweep.proc.returncode == 0, failing_sweep.proc.stderr[-2000:]
    row = read_records(failing_sweep.out)[0][0]  # the model that raises in its forward, on both ranks
    assert row["status"] == "failed"
    line = r"rank [01] failed (at step \d+|during set-up): RuntimeError: injected fault in forward"
    assert re.match(line, row["reason"]), row["reason"]
    log = Path(row["reason"].rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.parent == failing_sweep.out.parent / "s.logs" and "Traceback" in log.read_text()
