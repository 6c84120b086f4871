"""bench/commands/plan.py: `bench plan` end to end in this process (a hardware profile, a calibration), and its bad
input as one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from bench.cli import build_parser, main
from bench.commands import plan as plan_cli
from bench.harness.cli_args import config_from_args
from bench.harness.config import RunConfig, resolve
from bench.predict.calibration import Calibration
from tests.helpers.cli import run_in_process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CALIBRATION = ROOT / "reports" / "example-cpu-2core" / "calibration-mlp-small.json"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_plan_on_a_profile_ranks_explains_and_writes_runnable_commands(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.jsonl"
    assert main(["plan", "--hardware", "h200", "--model", "transformer", "--preset", "small", "--devices", "16",
                 "--top", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "PREDICTED" in printed and "weighed" in printed
    rows = records(out)
    assert [r["plan_rank"] for r in rows] == [1, 2, 3] and {r["kind"] for r in rows} == {"plan"}
    speeds = [r["predicted_samples_per_s"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    assert rows[0]["slower_than_above"] is None and all(r["slower_than_above"] for r in rows[1:])
    assert all(r["predicted_memory_bytes_per_device"] <= 141e9 * 0.9 for r in rows)
    searched = rows[0]["searched"]
    assert searched["weighed"] == (searched["fit"] + searched["too_big"] + sum(searched["refused"].values())
                                   + sum(searched["unpredicted"].values()) + searched["duplicates"])
    for row in rows:  # every command the plan prints is one bench run takes and validates
        config = config_from_args(RunConfig, build_parser().parse_args(shlex.split(row["command"])[3:]))
        assert config.run.precision == "bf16"
        here = config.with_flags(accelerator="cpu", precision="fp32", out=str(tmp_path / "x.jsonl"))
        assert resolve(here).run.devices == 16
        assert row["torchrun_command"] is None or "--nnodes 2" in row["torchrun_command"]


def test_a_plan_from_a_calibration_of_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    calibration = Calibration.load(EXAMPLE_CALIBRATION)
    monkeypatch.setattr(plan_cli, "machine_identity", lambda env: calibration.machine)  # as if taken here
    out = tmp_path / "plan.jsonl"
    assert main(["plan", "--calibration", str(EXAMPLE_CALIBRATION), "--model", "mlp", "--preset", "small",
                 "--devices", "2", "--global-batch", "64", "--out", str(out)]) == 0
    rows = records(out)
    assert rows and all(r["device_count"] == 2 and r["global_batch_size"] == 64 for r in rows)
    assert all(r["torchrun_command"] is None for r in rows)  # one machine
    assert "calibration" in rows[0]["source"]
    # without --global-batch, the calibration's own (its blocks were timed up to 64), not 64 per device
    default = tmp_path / "default.jsonl"
    assert main(["plan", "--calibration", str(EXAMPLE_CALIBRATION), "--model", "mlp", "--preset", "small",
                 "--devices", "4", "--top", "1", "--out", str(default)]) == 0
    assert records(default)[0]["global_batch_size"] == 64


@pytest.mark.parametrize(("argv", "message"), [
    (["--devices", "8"], "give one of --hardware"),
    (["--devices", "8", "--hardware", "h200", "--calibration", "c.json"], "give one of --hardware"),
    (["--devices", "8", "--hardware", "a9000"], "unknown hardware 'a9000'; profiles: "),
    (["--devices", "0", "--hardware", "h200"], "--devices must be at least 1, got 0"),
    (["--devices", "8", "--hardware", "h200", "--memory-headroom", "1.5"], "--memory-headroom is a share"),
    (["--devices", "8", "--hardware", "h200", "--strategies", "ddp,zz"], "unknown strategy 'zz'; choose from"),
    (["--devices", "8", "--hardware", "h200", "--memory-headroom", "0.999"],
     "nothing fits in 0.1 GiB per device: the smallest of"),
    (["--devices", "7", "--hardware", "h200", "--model", "transformer", "--preset", "tiny", "--global-batch", "3",
      "--strategies", "ddp,tp"], "no configuration of transformer/tiny on 7 device(s) at global batch 3"),
])
def test_bad_plan_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.jsonl"
    code, err = run_in_process(capsys, "plan", *argv, "--out", str(out))
    assert code == 2
    assert err.startswith("bench plan: error: ") and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_report_shows_the_plan_with_its_command_and_its_csv(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.jsonl"
    assert main(["plan", "--hardware", "h200", "--model", "mlp", "--preset", "small", "--devices", "8", "--top", "2",
                 "--out", str(out)]) == 0
    first = records(out)[0]
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    plan = md.split("## Plan", 1)[1].split("\n## ", 1)[0]
    assert "PREDICTED" in plan and f"`{first['command']}`" in plan
    assert f"| 1 | {first['label']} |" in plan
    csv = (tmp_path / "report" / "plan.csv").read_text().splitlines()
    assert len(csv) == 3 and csv[0].startswith("model,devices,global_batch,source,rank,configuration")
