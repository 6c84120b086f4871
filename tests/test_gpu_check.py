"""bench/gpu_check.sh under a fake ``python``: its steps' order, limits and rows, and what a failure or a
time limit leaves behind. The fake notes each command line and answers at once, fails, or hangs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
ORDER = ["environment", "gpu-tests", "transformer", "knobs", "verify", "sweep", "predict", "compile", "benchmark",
         "report", "verify-cpu"]

FAKE_PYTHON = """#!{python}
# A stand-in for python: one GPU, every command noted; FAKE_FAIL / FAKE_HANG name a part of the command line.
import os, sys, time
line = " ".join(sys.argv[1:])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(line.replace("\\n", " ") + "\\n")
if "torch.cuda.device_count()" in line:
    print(1)
if os.environ.get("FAKE_HANG") and os.environ["FAKE_HANG"] in line:
    time.sleep(60)
sys.exit(3 if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in line else 0)
"""


def check(tmp_path: Path, **env: str) -> tuple[int, list[list[str]], list[str]]:
    """Runs the script; returns its exit code, the rows of steps.tsv and the command lines the fake saw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    log, out = tmp_path / "calls.log", tmp_path / "out"
    full_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log), **env}
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env=full_env, capture_output=True, text=True,
                          timeout=120, check=False)
    rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    return proc.returncode, rows, log.read_text().splitlines()


def test_the_limits_add_up_to_eight_minutes_in_the_order_of_value() -> None:
    steps = re.findall(r"^step ([\w-]+) (\d+) ", SCRIPT.read_text(), flags=re.MULTILINE)
    assert [name for name, _ in steps] == ORDER
    assert sum(int(limit) for _, limit in steps) == 480


def test_every_step_writes_its_row_and_the_sweep_plans_no_row_one_gpu_cannot_host(tmp_path: Path) -> None:
    rc, rows, calls = check(tmp_path)
    assert rc == 0
    assert [r[0] for r in rows] == ORDER and all(r[3] == "0" for r in rows)
    assert sum(int(r[1]) for r in rows) == 480
    (sweep,) = [c for c in calls if "bench sweep --models cnn,transformer" in c]
    assert "--strategies single,ddp " in sweep and "--preset small" in sweep
    verifies = [c for c in calls if "bench verify --models mlp" in c]
    assert verifies == [c for c in verifies if "--strategies ddp --devices 1" in c] and len(verifies) == 1
    assert sum("bench verify --models transformer" in c for c in calls) == 2  # one process per pair
    assert sum("from bench.harness.environment import environment" in c for c in calls) == 1


def test_a_failing_knob_leaves_the_other_knobs_and_steps_running(tmp_path: Path) -> None:
    # Before: `--compile && --activation-checkpointing`, and a failed precision ended the knob runs.
    rc, rows, calls = check(tmp_path, FAKE_FAIL="--precision fp32")
    assert rc == 1
    assert {r[0]: r[3] for r in rows}["knobs"] == "1" and [r[0] for r in rows] == ORDER
    knobs = [c.rpartition("knobs.jsonl")[2].strip() for c in calls if "knobs.jsonl" in c]
    assert knobs == ["--precision fp32", "--precision tf32", "--precision bf16", "--precision fp16",
                     "--activation-checkpointing", "--compile"]


def test_a_step_past_its_limit_loses_itself_only(tmp_path: Path) -> None:
    # 2% of the limits: the gpu tests get 1 s and hang; every later step still runs and writes its row.
    rc, rows, _ = check(tmp_path, GPU_CHECK_LIMIT_PERCENT="2", FAKE_HANG="-m pytest -q -p no:cacheprovider -m gpu")
    assert rc == 1
    status = {r[0]: (int(r[1]), r[3]) for r in rows}
    assert status["gpu-tests"] == (1, "124")
    assert [r[0] for r in rows] == ORDER and all(r[3] == "0" for r in rows if r[0] != "gpu-tests")


@pytest.mark.parametrize("budget_s", ["1"])
def test_no_step_starts_past_the_budget(budget_s: str, tmp_path: Path) -> None:
    # Everything hangs: the first step gets the whole budget's 1 s, the rest a row saying no time was left.
    rc, rows, _ = check(tmp_path, GPU_CHECK_BUDGET_S=budget_s, FAKE_HANG="bench")
    assert rc == 1
    assert rows[0] == ["environment", "1", rows[0][2], "124"] and int(rows[0][2]) <= 2
    assert [r[0] for r in rows] == ORDER and all(r[3] == "-" for r in rows[1:])
