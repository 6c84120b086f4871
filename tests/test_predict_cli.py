"""``bench calibrate`` and ``bench predict``'s command line: defaults, the arithmetic calibrated, --hardware."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.predict.calibrate import calibration_arithmetic


def _help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_shows_the_defaults_of_out_devices_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    calibrate = _help(capsys, "calibrate")
    assert "(default: results/calibration.json)" in calibrate and "(default: (1, 2))" in calibrate
    assert "(default: mlp)" in calibrate
    predict = _help(capsys, "predict")
    assert "with --hardware results/what_if.jsonl" in predict and "(default: (1, 2))" in predict
    assert "(default: mlp)" in predict


def test_calibration_times_fp32_in_fp32_not_in_cudnns_default_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # torch's default, which 4fcc3e2 left on
    calibration_arithmetic("fp32")
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False


def test_predict_for_hardware_writes_where_the_readme_reads_by_default(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--hardware", "h200", "--model", "mlp", "--preset", "tiny", "--strategies", "ddp",
                 "--devices", "8"]) == 0
    assert (tmp_path / "results" / "what_if.jsonl").exists()
    assert not (tmp_path / "results" / "predictions.jsonl").exists()


def test_predict_takes_hybrids_degrees_as_bench_run_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 28 item 2: the predictor covers every mesh the runner runs, from the same flags."""
    monkeypatch.chdir(tmp_path)
    common = ["predict", "--hardware", "h200", "--model", "mlp", "--preset", "tiny", "--strategies", "hybrid",
              "--devices", "4"]
    assert main([*common, "--dp-shard", "2", "--tp", "2", "--microbatches", "1"]) == 0
    assert main(common) == 0  # the default mesh: dp x pp 2
    records = [json.loads(line) for line in (tmp_path / "results" / "what_if.jsonl").read_text().splitlines()]
    meshes = [tuple(r["config"][d] for d in ("dp", "dp_shard", "pp", "tp")) for r in records]
    assert meshes == [(1, 2, 1, 2), (2, 1, 2, 1)]
    sharded, pipelined = records
    assert sharded["predicted_bubble"] == 0 < pipelined["predicted_bubble"]  # no pipeline, no bubble
    # tp halves the split layers' parameters and dp_shard shards the rest: less per device than replicas
    assert (sharded["predicted_memory_by_kind"]["parameters"]
            < pipelined["predicted_memory_by_kind"]["parameters"])
