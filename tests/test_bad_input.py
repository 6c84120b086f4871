"""Every bad command line: one line naming the numbers or the choices, exit 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from strategies import STRATEGIES
from tests.helpers.cli import run_bench, run_in_process

BAD_RUNS = [
    (["--strategy", "magic"], f"unknown strategy 'magic'; choose from {', '.join(STRATEGIES)}"),
    (["--model", "gpt"], "unknown model 'gpt'; choose from mlp, cnn, rnn, transformer"),
    (["--preset", "huge"], "unknown preset 'huge'; choose from tiny, small, large"),
    (["--norm", "layer"], "unknown norm 'layer'; choose from batch, group"),
    (["--optimizer", "lamb"], "unknown optimizer 'lamb'; choose from sgd, adam"),
    (["--accelerator", "tpu"], "unknown accelerator 'tpu'; choose from auto, cpu, cuda"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--batch-size", "-4"], "--batch-size must be at least 1, got -4"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--devices", "-1"], "--devices must be at least 1, got -1"),
    (["--warmup", "-2"], "--warmup must be 0 or more, got -2"),
    (["--lr", "0"], "--lr must be positive, got 0.0"),
    (["--devices", "2"], "strategy 'single' runs on exactly 1 device, got --devices 2"),
    (["--accelerator", "cuda"], "--accelerator cuda asked for, but torch sees no CUDA device"),
    (["--model", "no_such_pkg.mod:build"], "cannot import 'no_such_pkg.mod'"),
    (["--model", "json:no_such_function"], "module 'json' has no function 'no_such_function'"),
    (["--steps", "three"], "argument --steps: invalid int value: 'three'"),
    (["--backend", "mpi"], "unknown backend 'mpi'; choose from auto, gloo, nccl"),
    (["--precision", "fp8"], "unknown precision 'fp8'; choose from auto, fp32, tf32, bf16, fp16"),
    (["--precision", "tf32", "--accelerator", "cpu"], "--precision tf32 is a CUDA tensor-core mode; on cpu choose"),
    (["--strategy", "pp", "--devices", "2", "--precision", "fp16"],
     "--precision fp16 needs one gradient scaler over the whole model, and pp keeps its stages in separate"),
    (["--strategy", "dp", "--compile"], "--compile: strategy 'dp' cannot compile: nn.DataParallel copies the module"),
    (["--model", "mlp", "--channels-last"], "--channels-last applies to 4-D image inputs (the cnn); model 'mlp' has"),
    (["--peak-tflops", "0"], "--peak-tflops must be positive, got 0.0"),
    (["--strategy", "tp", "--devices", "2", "--model", "cnn"],
     "strategy 'tp' needs a tensor-parallel plan and this model has none: no sharding rule for BatchNorm2d, Conv2d"),
    (["--strategy", "tp", "--devices", "4", "--model", "transformer"],
     "tensor-parallel degree 4 does not divide attention heads 2 (--devices 4)"),
    (["--strategy", "tp", "--devices", "3", "--model", "mlp"],
     "tensor-parallel degree 3 does not divide hidden width 32 (--devices 3)"),
    (["--strategy", "fsdp", "--devices", "2", "--precision", "fp16"],
     "--precision fp16 needs a gradient scaler that unscales sharded gradients"),
    (["--strategy", "ddp", "--devices", "2", "--no-reshard-after-forward"],
     "--reshard-after-forward is for fsdp, not ddp"),
    (["--strategy", "dp", "--devices", "2", "--dp-shard", "2"], "--dp-shard 2 is for hybrid, not dp"),
    (["--strategy", "tp", "--devices", "2", "--tp", "2"], "--tp 2 is for hybrid, not tp"),
    (["--strategy", "ddp", "--devices", "2", "--accelerator", "cpu", "--backend", "nccl"],
     "--backend nccl needs CUDA tensors, but this run is on cpu"),
]


@pytest.mark.parametrize(("args", "message"), BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_bad_run_input_is_one_clear_line(
    args: list[str], message: str, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results.write_text('{"kept": true}\n')
    code, err = run_in_process(capsys, "run", "--preset", "tiny", "--out", str(results), *args)
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err
    assert results.read_text() == '{"kept": true}\n'  # nothing appended or overwritten


@pytest.mark.launches
def test_a_bad_command_line_in_a_real_process_exits_2_without_traceback(results: Path) -> None:
    proc = run_bench("run", "--strategy", "magic", "--out", str(results), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"bench run: error: unknown strategy 'magic'; choose from {', '.join(STRATEGIES)}\n"
    assert not results.exists()


def test_more_gpus_than_the_machine_has(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # On a machine without GPUs, ask for CUDA explicitly; with GPUs, ask for one more than exist.
    import torch

    gpus = torch.cuda.device_count()
    args = ["--accelerator", "cuda", "--devices", str(gpus + 1)]
    code, err = run_in_process(capsys, "run", "--preset", "tiny", "--out", str(results), *args)
    assert code == 2 and err.count("\n") == 1
    assert "CUDA" in err or f"has {gpus} GPU(s)" in err
    assert not results.exists()


@pytest.mark.parametrize("strategy", ["pp", "hybrid"])
def test_gloo_for_pipeline_sends_of_cuda_tensors_is_refused_before_launch(strategy: str) -> None:
    # Checked on the numbers alone, so it runs without a GPU: the config says cuda, the strategy refuses.
    from bench.harness.config import RunConfig
    from strategies import ConfigError, build_strategy
    from strategies.options import ModelFacts

    config = RunConfig.from_flags(strategy=strategy, model="mlp", preset="tiny", devices=4, batch_size=8,
                                  microbatches=2,
                       accelerator="cuda", backend="gloo")
    with pytest.raises(ConfigError, match="need the nccl backend: gloo cannot send CUDA tensors point to point"):
        build_strategy(strategy, config).validate(ModelFacts(blocks=5, gpus=4))


def test_unwritable_output_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code, err = run_in_process(capsys, "run", "--preset", "tiny", "--out", str(blocker / "results.jsonl"))
    assert code == 2 and err.count("\n") == 1
    assert f"cannot write in {blocker}" in err


@pytest.mark.parametrize("out", ["/proc/results.jsonl", "/sys/r.jsonl"])
def test_an_output_on_a_pseudo_file_system_is_refused_even_for_root(out: str, capsys: pytest.CaptureFixture[str]
                                                                     ) -> None:
    # Root passes every permission-bit check; /proc and /sys still refuse new files.
    code, err = run_in_process(capsys, "run", "--preset", "tiny", "--out", out)
    assert code == 2 and err.count("\n") == 1
    assert f"cannot write in {Path(out).parent}" in err


def test_an_existing_results_file_is_checked_without_being_changed(tmp_path: Path) -> None:
    from bench.harness.config import RunConfig, resolve

    results = tmp_path / "kept.jsonl"
    results.write_text('{"kept": true}\n')
    resolve(RunConfig.from_flags(preset="tiny", out=str(results)))
    assert results.read_text() == '{"kept": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl"]


@pytest.mark.parametrize("rank", ["0", "3"])
def test_under_a_users_torchrun_only_rank_0_prints_the_refusal(rank: str, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
                        "TORCHELASTIC_RUN_ID": "test"}.items():
        monkeypatch.setenv(name, value)
    code, err = run_in_process(capsys, "run", "--strategy", "ddp", "--devices", "2", "--preset", "tiny")
    assert code == 2
    expected = "--devices 2 does not match torchrun's world size 4"
    assert (expected in err and err.count("\n") == 1) if rank == "0" else err == ""
