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
ORDER = ["environment", "verify", "verify-cpu", "gpu-tests", "transformer", "knobs", "sweep", "benchmark", "report"]
BESIDE = {"verify", "verify-cpu"}
"""The steps that time nothing, run beside the GPU tests on a GPU machine."""

FAKE_PYTHON = """#!{python}
# A stand-in for python: one GPU, every command noted; FAKE_FAIL / FAKE_HANG name a part of the command line.
import os, sys, time
line = " ".join(sys.argv[1:])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("%.3f " % time.time() + line.replace("\\n", " ") + "\\n")
if "torch.cuda.device_count()" in line:
    print(os.environ.get("FAKE_GPUS", "1"))
if os.environ.get("FAKE_HANG") and os.environ["FAKE_HANG"] in line:
    time.sleep(60)
sys.exit(3 if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in line else 0)
"""


def started(calls: list[str], part: str) -> float:
    """When the fake saw the first command line holding ``part`` (its clock's seconds)."""
    return min(float(c.split(" ", 1)[0]) for c in calls if part in c)


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


def listed_steps() -> list[tuple[str, str, int]]:
    """(kind, name, limit) of each step as the script lists them; the report's limit is REPORT_S."""
    text = SCRIPT.read_text()
    report_s = re.search(r"^REPORT_S=(\d+)$", text, flags=re.MULTILINE)
    assert report_s
    steps = re.findall(r"^(step|step_beside) ([\w-]+) (\d+|\"\$REPORT_S\") ", text, flags=re.MULTILINE)
    return [(kind, name, int(report_s[1] if "REPORT_S" in limit else limit)) for kind, name, limit in steps]


def in_order(rows: list[list[str]]) -> list[list[str]]:
    """steps.tsv's rows in the script's order (the steps beside the GPU tests land as they end)."""
    return sorted(rows, key=lambda row: ORDER.index(row[0]))


def test_the_limits_add_up_to_eight_minutes_in_the_order_of_value() -> None:
    steps = listed_steps()
    assert [name for _, name, _ in steps] == ORDER
    assert sum(limit for kind, _, limit in steps if kind == "step") == 480
    assert {name for kind, name, _ in steps if kind == "step_beside"} == BESIDE
    # What runs beside the GPU tests ends within their limit, so it adds nothing to the eight minutes.
    limits = {name: limit for _, name, limit in steps}
    assert max(limits[name] for name in BESIDE) <= limits["gpu-tests"]


def test_every_step_writes_its_row_and_the_sweep_plans_no_row_one_gpu_cannot_host(tmp_path: Path) -> None:
    rc, rows, calls = check(tmp_path)
    assert rc == 0
    assert [r[0] for r in in_order(rows)] == ORDER and all(r[3] == "0" for r in rows)
    assert sum(int(r[1]) for r in rows if r[0] not in BESIDE) == 480
    (calibrate,) = [c for c in calls if "bench calibrate" in c]
    (sweep,) = [c for c in calls if "bench sweep" in c]
    assert "--devices 1 " in calibrate and "--preset large" in calibrate
    assert "--strategies single,ddp " in sweep and "--devices 1 " in sweep and "--calibration" in sweep
    verifies = [c for c in calls if "bench verify --models mlp" in c]
    assert verifies == [c for c in verifies if "--strategies ddp --devices 1" in c] and len(verifies) == 1
    assert sum("bench verify --models transformer" in c for c in calls) == 2  # one process per pair
    assert sum("from bench.harness.environment import environment" in c for c in calls) == 1


def test_a_failing_knob_leaves_the_other_knobs_and_steps_running(tmp_path: Path) -> None:
    # Before: `--compile && --activation-checkpointing`, and a failed precision ended the knob runs.
    rc, rows, calls = check(tmp_path, FAKE_FAIL="--precision fp32")
    assert rc == 1
    assert {r[0]: r[3] for r in rows}["knobs"] == "1" and [r[0] for r in in_order(rows)] == ORDER
    knobs = [c.rpartition("knobs.jsonl")[2].strip() for c in calls if "knobs.jsonl" in c]
    assert knobs == ["--precision fp32", "--precision tf32", "--precision bf16", "--precision fp16",
                     "--activation-checkpointing"]


def test_a_step_past_its_limit_loses_itself_only(tmp_path: Path) -> None:
    # 2% of the limits: the gpu tests get 2 s and hang; every later step still runs and writes its row.
    rc, rows, _ = check(tmp_path, GPU_CHECK_LIMIT_PERCENT="2", FAKE_HANG="-m pytest -q -p no:cacheprovider -m gpu")
    assert rc == 1
    status = {r[0]: (int(r[1]), r[3]) for r in rows}
    assert status["gpu-tests"] == (2, "124")
    assert [r[0] for r in in_order(rows)] == ORDER and all(r[3] == "0" for r in rows if r[0] != "gpu-tests")


@pytest.mark.parametrize("budget_s", ["1"])
def test_no_step_starts_past_the_budget(budget_s: str, tmp_path: Path) -> None:
    # Everything hangs: the report's limit is held back, so no step before it has time left, and the report
    # gets the whole budget's 1 s.
    rc, rows, _ = check(tmp_path, GPU_CHECK_BUDGET_S=budget_s, FAKE_HANG="bench")
    assert rc == 1
    assert [r[0] for r in in_order(rows)] == ORDER and all(r[3] == "-" for r in rows[:-1])
    assert rows[-1] == ["report", "1", rows[-1][2], "124"] and int(rows[-1][2]) <= 2


def test_the_verify_steps_run_beside_the_gpu_tests_on_a_gpu(tmp_path: Path) -> None:
    # Both verify steps hang to their limits (1 and 2 s at 3%); beside, the GPU tests start with them, where
    # in line they would start after both (3 s later).
    rc, rows, calls = check(tmp_path, GPU_CHECK_LIMIT_PERCENT="3", FAKE_HANG="bench verify")
    assert rc == 1
    status = {r[0]: r[3] for r in rows}
    assert (status["verify"], status["verify-cpu"], status["gpu-tests"]) == ("124", "124", "0")
    assert started(calls, "-m gpu tests") - started(calls, "bench verify --models mlp") < 0.9


def test_gpu_check_only_runs_the_steps_it_names_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    rc, rows, calls = check(tmp_path, GPU_CHECK_ONLY="knobs,report")
    assert rc == 0 and [r[0] for r in rows] == ["knobs", "report"]
    assert not any("-m gpu tests" in c or "bench verify" in c for c in calls)
    out = tmp_path / "unknown"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env={**os.environ, "GPU_CHECK_ONLY": "knobs,knob"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and not out.exists()
    (line,) = proc.stderr.strip().splitlines()
    assert "'knob'" in line and "knobs" in line and "benchmark" in line


def test_two_gpus_sweep_and_verify_every_strategy_they_host_and_calibrate_what_it_needs(tmp_path: Path) -> None:
    rc, rows, calls = check(tmp_path, FAKE_GPUS="2")
    assert rc == 0 and [r[0] for r in in_order(rows)] == ORDER
    (calibrate,) = [c for c in calls if "bench calibrate" in c]
    (sweep,) = [c for c in calls if "bench sweep" in c]
    assert "--devices 1,2 " in calibrate and "--microbatches 1,4 " in calibrate  # pp's micro-batches, 2 GPUs
    assert "--strategies single,ddp,fsdp,tp,pp " in sweep and "--devices 1,2 " in sweep
    verifies = [c.rpartition("--strategies ")[2].split()[0] for c in calls if "bench verify --models mlp" in c]
    assert verifies == ["ddp", "fsdp", "tp"]
