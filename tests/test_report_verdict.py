"""The verdict (reports/sections/verdict.py): per model and device count, what to use, why, how sure, how to run it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from bench.cli import build_parser
from bench.harness.cli_args import config_from_args
from bench.harness.config import RunConfig
from reports.build import build_report
from reports.load import load
from reports.sections.verdict import LEFT_OUT_OF_COMMANDS, command
from tests.helpers.records import record, repeated, tracked


def _md(tmp_path: Path, records: list[dict]) -> str:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    build_report(load([path]), tmp_path / "out")
    return (tmp_path / "out" / "report.md").read_text()


def test_the_command_runs_the_very_configuration_again() -> None:
    config = {**record("pp", 2, 250.0, microbatches=4)["config"], "schedule": "1f1b", "reshard_after_forward": False,
              "out": "results/sweep.jsonl", "batch_size": 64, "steps": 6}
    argv = shlex.split(command(config))
    assert argv[:4] == ["python", "-m", "bench", "run"]
    parsed = config_from_args(RunConfig, build_parser().parse_args(argv[3:]))
    for name, value in config.items():
        if name not in LEFT_OUT_OF_COMMANDS and name in RunConfig.__dataclass_fields__:
            assert getattr(parsed, name) == value, name


def test_a_winner_is_named_with_its_interval_memory_and_check(tmp_path: Path) -> None:
    runs = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0, memory_by_kind=tracked(4, 4, 4, 16)),
            *repeated("mp", 2, 90.0)]
    for r in runs:
        r["env"]["device_memory_bytes"] = 64 * 2**20  # 32 MiB per process on a 2-process CPU run
    md = _md(tmp_path, runs)
    line = next(x for x in md.splitlines() if x.startswith("**mlp/small on 2 device(s)"))
    assert "use **ddp**. 180.0 [178.2, 181.8] samples/s (90.0 per device), 1.80 [1.80, 1.80]x single" in line
    assert "16 MiB per device (tracked), fits in 32" in line
    assert "not verified" in line and "a winner: its interval clears every other's" in line
    assert "`python -m bench run " in line and "--strategy ddp" in line and "--devices 2" in line


def test_a_tie_lists_every_configuration_within_noise_and_memory_that_does_not_fit_says_so(tmp_path: Path) -> None:
    runs = [*repeated("single", 1, 100.0, memory_by_kind=tracked(4, 4, 4, 80)),
            *[record("ddp", 2, s, repeat=i) for i, s in enumerate((150.0, 160.0, 155.0))],
            *[record("mp", 2, s, repeat=i) for i, s in enumerate((152.0, 158.0, 149.0))]]
    for r in runs:
        r["env"]["device_memory_bytes"] = 64 * 2**20
    md = _md(tmp_path, runs)
    assert "use **ddp or mp (m=1)**" in md and "a tie: their intervals overlap" in md
    assert "80 MiB per device (tracked), DOES NOT FIT in 64" in md  # single on 1 process: the host's 64 MiB
    assert md.count("EMULATED: up to 2 processes shared this machine's 2 CPU cores") == 1
    assert "for GPUs, `bench predict --hardware h200 ...` adds a PREDICTED cluster" in md


def test_a_speed_up_over_another_baseline_is_not_called_one_over_single(tmp_path: Path) -> None:
    # Seen on a real `bench run` pair whose single run was disturbed: ddp was "1.00x single", over itself.
    md = _md(tmp_path, [record("single", 1, 100.0, disturbed=True), record("ddp", 2, 180.0)])
    line = next(x for x in md.splitlines() if x.startswith("**mlp/small on 2 device(s)"))
    assert "use **ddp**. 180.0 samples/s (90.0 per device);" in line and "x single" not in line
    assert "adds a PREDICTED cluster to this report" in md  # no what-if records to point to
