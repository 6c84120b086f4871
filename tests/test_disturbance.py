"""A run knows when the machine was not its own (bench/harness/disturbance.py)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import disturbance
from bench.harness.disturbance import FOREIGN_SHARE_LIMIT, RankLoad, judge
from bench.harness.records import read_records
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
    quiet_but_busy = [load(own_cpu_s=3.8, machine_busy_s=3.9)]  # 0.1 s of others' CPU: quiet
    assert not judge(quiet_but_busy, cores=2).disturbed
    # The broken variant is the real judge with its subtraction of the run's own CPU taken out: it flags
    # the quiet run, so the assertion above is one this test is seen to fail on.
    source = inspect.getsource(disturbance.judge)
    broken_source = source.replace("busy - sum(r.own_cpu_s for r in ranks)", "busy")
    assert broken_source != source, "the subtraction this test breaks is no longer in judge"
    namespace = dict(vars(disturbance))
    exec(compile(broken_source, disturbance.__file__, "exec"), namespace)  # noqa: S102
    assert namespace["judge"](quiet_but_busy, cores=2).disturbed


def test_other_processes_on_the_gpus_disturb_a_run() -> None:
    verdict = judge([load()], cores=2, gpu_tenants=1)
    assert verdict.disturbed and verdict.reason == "1 other process(es) computed on its GPUs"


def test_gpu_tenants_that_could_not_be_seen_are_unknown_and_disturb_nothing() -> None:
    verdict = judge([load()], cores=2, gpu_tenants=None)
    assert not verdict.disturbed and verdict.reason is None
    assert verdict.record_fields([load()])["machine_load"]["gpu_tenants"] == "unknown"
    assert judge([load()], cores=2, gpu_tenants=2).record_fields([load()])["machine_load"]["gpu_tenants"] == 2


FAKE_NVIDIA_SMI = """#!{python}
# nvidia-smi --query-compute-apps=FIELDS --format=csv,noheader, over the apps in $FAKE_GPU_APPS.
import json, os, sys
query = next(a for a in sys.argv[1:] if a.startswith("--query-compute-apps="))
fields = query.partition("=")[2].split(",")
for pid, gpu in json.loads(os.environ["FAKE_GPU_APPS"]):
    print(", ".join(str({{"pid": pid, "gpu_uuid": gpu}}[f]) for f in fields))
"""

OWN = os.getpid()  # the run's rank, as the reporting rank passes it
LAUNCHER = os.getppid()  # pytest's parent here; a launcher that made a CUDA context of its own


@pytest.mark.parametrize(
    ("apps", "tenants"),
    [
        ([(OWN, "GPU-a"), (900002, "GPU-a")], 1),
        ([(OWN, "GPU-a"), (900002, "GPU-b")], 0),  # another job on the node's other GPU (before: 1)
        ([(OWN, "GPU-a"), (LAUNCHER, "GPU-a")], 0),  # the launching process's own context (before: 1)
        ([(OWN, "GPU-a"), (OWN, "GPU-b"), (900002, "GPU-b"), (900003, "GPU-c")], 1),
        ([(700001, "GPU-a"), (700002, "GPU-a")], None),  # host PIDs from a container (before: 2)
        ([], None),
    ],
)
def test_gpu_tenants_count_only_the_runs_own_gpus_under_a_faked_nvidia_smi(
    apps: list[tuple[int, str]], tenants: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_APPS", json.dumps(apps))
    assert disturbance.gpu_tenants({OWN}) == tenants


def test_gpu_tenants_are_unknown_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi (before: 0, none seen)
    assert disturbance.gpu_tenants({OWN}) is None


def test_the_launching_tree_is_this_processs_ancestors() -> None:
    tree = disturbance.launching_tree()
    assert LAUNCHER in tree and OWN not in tree
    assert disturbance.launching_tree(LAUNCHER) < tree


@pytest.mark.alone
@pytest.mark.launches
def test_a_run_beside_a_cpu_hog_is_flagged(tmp_path: Path) -> None:
    hog = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]  # both cores
    try:
        out = tmp_path / "r.jsonl"
        # Long enough to be judged whatever the hogs leave it (JUDGE_MIN_WALL_S): forked from the tests' fork server,
        # the run's window no longer holds an interpreter's imports, and 20 steps of the tiny mlp took 0.3-0.5 s
        # where they got the cores (too short to judge) and 5 s where they did not. The sleeping model's steps take
        # 40 ms (8 samples x SLEEP_MS_PER_SAMPLE) either way.
        proc = run_bench("run", "--strategy", "single", "--model", "tests.faulty_models:sleeping", "--preset", "tiny",
                         "--batch-size", "8", "--steps", "20", "--out", str(out))
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = read_records(out)[0]
    assert record["disturbed"] is True, record["machine_load"]
    assert "other processes used" in record["disturbed_reason"]
    assert record["machine_load"]["foreign_cpu_share"] > FOREIGN_SHARE_LIMIT


def test_the_timed_steps_own_cpu_time_is_accounted_apart_from_the_whole_window() -> None:
    import time

    disturbance.open_window()
    end = time.process_time() + 0.05
    while time.process_time() < end:  # the window's own work before the timed steps: not theirs
        pass
    disturbance.start_timing()
    time.sleep(0.05)  # a timed step that waits (a pipeline's rank between its actions, blocked on a receive)
    window = disturbance.close_window()
    assert window.timed_wall_s is not None and window.timed_cpu_s is not None
    assert 0.05 <= window.timed_wall_s < window.wall_s
    assert window.timed_cpu_s < 0.04 < window.own_cpu_s
    assert disturbance.close_window().timed_cpu_s is None  # one mark per run: the next window is not marked


def test_the_record_keeps_the_timed_steps_cpu_only_where_every_rank_marked_them() -> None:
    marked = dataclasses.replace(load(), timed_cpu_s=0.25, timed_wall_s=0.5)
    fields = judge([marked, marked], cores=2).record_fields([marked, marked])["machine_load"]
    assert fields["timed_cpu_s_per_rank"] == [0.25, 0.25] and fields["timed_wall_s_per_rank"] == [0.5, 0.5]
    unmarked = judge([marked, load()], cores=2).record_fields([marked, load()])["machine_load"]
    assert "timed_cpu_s_per_rank" not in unmarked


@pytest.mark.launches
def test_a_runs_record_times_its_steps_cpu_apart_from_its_start(tmp_path: Path) -> None:
    # Each of ddp's two ranks steps 4 samples: 20 ms asleep (SLEEP_MS_PER_SAMPLE), almost nothing computed. One
    # thread a rank, so a rank's CPU time grows only while it runs: a busy machine stretches its wall time, not its
    # CPU. (Run as `single` with two threads, a busy CI machine read 0.83 s of CPU over 1.02 s of timed steps.)
    out = tmp_path / "r.jsonl"
    proc = run_bench("run", "--strategy", "ddp", "--devices", "2", "--model", "tests.faulty_models:sleeping",
                     "--preset", "tiny", "--batch-size", "8", "--steps", "5", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = read_records(out)[0]
    machine = record["machine_load"]
    assert record["threads_per_process"] == [1, 1]
    for rank in range(2):
        timed_wall, timed_cpu = machine["timed_wall_s_per_rank"][rank], machine["timed_cpu_s_per_rank"][rank]
        assert 5 * 0.02 <= timed_wall < machine["wall_s_per_rank"][rank]  # the steps, not the warm-up and start
        # asleep for most of its steps, a rank takes far less CPU than wall time over them; its start (imports,
        # the model built, the process group joined) is CPU alone
        assert timed_cpu < 0.5 * timed_wall and timed_cpu < machine["own_cpu_s_per_rank"][rank]
