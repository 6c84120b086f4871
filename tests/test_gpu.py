"""The CPU tests' bodies on CUDA devices; skipped, with the reason, where the GPUs are missing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.harness.checkpoint import load_checkpoint
from bench.harness.config import RunConfig, resolve
from bench.harness.devices import gpu_part
from bench.harness.records import read_records
from bench.harness.runner import global_losses, train
from tests.helpers.cli import run_bench
from tests.helpers.equivalence import assert_matches_reference, reference

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
needs_2_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA devices")
pytestmark = pytest.mark.gpu


@needs_gpu
def test_a_gpu_run_records_the_allocator_peak_and_mfu(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_bench("run", "--accelerator", "cuda", "--model", "cnn", "--preset", "tiny", "--steps", "3",
                     "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (record,) = read_records(out)[0]
    assert record["accelerator"] == "cuda" and record["emulated"] is False
    assert record["peak_mem_source"] == "cuda_max_memory_allocated" and record["peak_mem_bytes"][0] > 0
    assert record["env"]["gpu_count"] == GPUS and record["env"]["cuda"]
    if gpu_part(torch.cuda.get_device_name(0)) is not None:
        assert 0 < record["mfu"] < 1


@needs_gpu
def test_single_on_the_gpu_trains_like_single_on_the_cpu(tmp_path: Path) -> None:
    config = RunConfig.from_flags(model="mlp", preset="tiny", steps=3, warmup=0, precision="fp32",
                                  out=str(tmp_path / "r.jsonl"))
    cpu = global_losses(train(resolve(config.with_flags(accelerator="cpu"))).ranks)
    gpu = global_losses(train(resolve(config.with_flags(accelerator="cuda"))).ranks)
    torch.testing.assert_close(torch.tensor(gpu), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


@needs_2_gpus
@pytest.mark.parametrize("microbatches", [1, 4])
def test_mp_across_two_gpus_trains_like_one(microbatches: int, tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(strategy="mp", model="cnn", preset="tiny", norm="group", devices=2, steps=3,
                                          warmup=0, microbatches=microbatches, accelerator="cuda", precision="fp32",
                                          out=str(tmp_path / "r.jsonl")))
    result = train(config, capture_state=True)
    assert_matches_reference(global_losses(result.ranks), result.model_state, reference(config))


@needs_2_gpus
@pytest.mark.parametrize("strategy", ["ddp", "pp", "dp", "tp", "fsdp", "zero1"])
def test_multi_gpu_strategies_run_end_to_end(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    microbatches = "4" if strategy == "pp" else "1"
    proc = run_bench("run", "--strategy", strategy, "--devices", "2", "--accelerator", "cuda", "--model", "mlp",
                     "--preset", "tiny", "--microbatches", microbatches, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (record,) = read_records(out)[0]
    assert record["device_count"] == 2 and record["emulated"] is False


@needs_gpu
def test_gpu_defaults_are_bf16_and_channels_last_for_the_cnn(tmp_path: Path) -> None:
    cnn = resolve(RunConfig.from_flags(model="cnn", accelerator="cuda", out=str(tmp_path / "r.jsonl")))
    mlp = resolve(RunConfig.from_flags(model="mlp", accelerator="cuda", out=str(tmp_path / "r.jsonl")))
    assert (cnn.run.precision, cnn.knobs.channels_last) == ("bf16", True)
    assert (mlp.run.precision, mlp.knobs.channels_last) == ("bf16", False)


@needs_gpu
@pytest.mark.parametrize(
    "knobs",
    [{"precision": "tf32"}, {"precision": "bf16", "channels_last": True}, {"precision": "fp16"}, {"compile": True},
     {"activation_checkpointing": True}],
    ids=["tf32", "bf16-channels-last", "fp16", "compile", "activation-checkpointing"],
)
def test_training_knobs_run_on_the_gpu_near_fp32(knobs: dict, tmp_path: Path) -> None:
    config = RunConfig.from_flags(model="cnn", norm="group", preset="tiny", steps=3, warmup=1, accelerator="cuda",
                                  precision="fp32", channels_last=False, out=str(tmp_path / "r.jsonl"))
    fp32 = global_losses(train(resolve(config)).ranks)
    losses = global_losses(train(resolve(config.with_flags(**knobs))).ranks)
    assert all(torch.isfinite(torch.tensor(losses)))
    # The first loss comes before any update (and before fp16's scaler can skip one): bf16's tolerance at worst.
    torch.testing.assert_close(torch.tensor(losses[:1]), torch.tensor(fp32[:1]), rtol=5e-2, atol=0.0)


@needs_2_gpus
def test_sync_batchnorm_makes_ddp_on_the_cnn_train_like_one_device_on_the_global_batch(tmp_path: Path) -> None:
    # Each replica's BatchNorm sees half the batch; synchronised, its statistics are the global batch's, as
    # single's are. Without --sync-batchnorm the same comparison must fail, or it would prove nothing.
    config = RunConfig.from_flags(model="cnn", preset="tiny", norm="batch", steps=3, warmup=1, accelerator="cuda",
                                  precision="fp32", channels_last=False, batch_size=16, out=str(tmp_path / "r.jsonl"))
    want_losses, want = reference(resolve(config))
    distances = {}
    for sync in (True, False):
        checkpoint = tmp_path / f"sync-{sync}.pt"
        proc = run_bench("run", "--strategy", "ddp", "--devices", "2", "--accelerator", "cuda", "--model", "cnn",
                         "--preset", "tiny", "--steps", "3", "--warmup", "1", "--precision", "fp32",
                         "--no-channels-last", "--batch-size", "16", "--save-checkpoint", str(checkpoint),
                         "--out", str(tmp_path / "r.jsonl"), *(["--sync-batchnorm"] if sync else []))
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = load_checkpoint(checkpoint, "cnn", "tiny")
        distances[sync] = max(((got[k] - v).abs().max() / v.abs().max().clamp_min(1e-12)).item()
                              for k, v in want.items() if v.is_floating_point())
    synced, unsynced = read_records(tmp_path / "r.jsonl")[0]
    assert (synced["strategy_fields"]["sync_batchnorm"], unsynced["strategy_fields"]["sync_batchnorm"]) == (True, False)
    torch.testing.assert_close(torch.tensor(synced["losses"]), torch.tensor(want_losses), rtol=1e-3, atol=0.0)
    assert distances[True] < 1e-3 < distances[False], distances


@needs_gpu
def test_deterministic_cnn_is_refused_on_the_gpu_in_one_line_and_the_mlp_reruns_bit_for_bit(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    refused = run_bench("run", "--accelerator", "cuda", "--model", "cnn", "--preset", "tiny", "--deterministic",
                        "--out", str(out))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "AdaptiveAvgPool2d" in refused.stderr and not out.exists()
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", steps=3, warmup=1, accelerator="cuda",
                                          deterministic=True,
                               out=str(out)))
    first, second = (global_losses(train(config).ranks) for _ in range(2))
    assert first == second
