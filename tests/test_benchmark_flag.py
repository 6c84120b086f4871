"""``pytest --benchmark``: real timing into pytest-benchmark's JSON, the report reading it, xdist refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from tests.helpers.cli import ROOT


def run_pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A fresh pytest, as a user would start it: not an xdist worker though this one may be."""
    own = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=400, env={**own, **(env or {})})


# Not `alone`: it asserts what the JSON holds, not what the timings are (it passed beside a busy loop on each of the
# two cores).
@pytest.mark.distributed
def test_benchmark_flag_times_the_matrix_into_json_the_report_reads(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = run_pytest("tests/benchmarks", "--benchmark", "--bench-strategies", "single,ddp", "--bench-models", "mlp",
                      "--bench-devices", "1,2", "--bench-steps", "3", "--bench-warmup", "1",
                      f"--benchmark-json={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    by_name = {b["name"]: b for b in data["benchmarks"]}
    assert set(by_name) == {"test_step[single-mlp-tiny-1dev]", "test_torchrun_launch[ddp-mlp-tiny-1dev]",
                            "test_torchrun_launch[ddp-mlp-tiny-2dev]"}
    assert {b["group"] for b in data["benchmarks"]} == {"mlp/tiny"}
    single = by_name["test_step[single-mlp-tiny-1dev]"]
    assert single["stats"]["rounds"] == 3  # timed rounds, warm-up excluded
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        assert info["samples_per_s"] > 0 and info["record"]["status"] == "ok"
        assert info["peak_mem_source"] == "process_peak_rss"
    ddp2 = by_name["test_torchrun_launch[ddp-mlp-tiny-2dev]"]["extra_info"]
    assert ddp2["processes"] == 2 and ddp2["emulated"] is True
    assert ddp2["scaling_efficiency"] == pytest.approx(
        ddp2["samples_per_s"] / (2 * single["extra_info"]["samples_per_s"])
    )
    assert data["machine_info"]["parallelism_suite"]["cpu_cores"] == os.cpu_count()

    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "3 configuration(s) measured" in md and "| mlp/tiny | 2 | ddp |" in md


@pytest.mark.launches
def test_benchmark_flag_refuses_xdist_with_one_line() -> None:
    proc = run_pytest("tests/benchmarks", "--benchmark", "--co", env={"PYTEST_XDIST_WORKER": "gw0"})
    assert proc.returncode == 4  # pytest's usage error
    assert "--benchmark times one configuration at a time on the whole machine; run it without xdist" in proc.stderr
