"""``ddp``: batch shards, equivalence with one device on 2 gloo ranks, bad inputs, torchrun end to end, crashes."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from bench.cli import main
from bench.harness.config import RunConfig, resolve
from bench.harness.records import read_records
from bench.harness.runner import global_losses
from strategies.base import Topology
from tests.helpers.cli import BenchRun
from tests.helpers.equivalence import assert_matches_reference, reference
from tests.helpers.ranks import merged_state, run_ranks, run_ranks_sequence

# --- equivalence with one device, 2 gloo ranks --------------------------------------------


def _config(tmp_path: Path, model: str, norm: str = "group", **kw: object) -> RunConfig:
    return resolve(RunConfig.from_flags(strategy="ddp", devices=2, model=model, preset="tiny", norm=norm, steps=2,
                                        warmup=1,
                             accelerator="cpu", out=str(tmp_path / "r.jsonl"), timeout_s=60, **kw))


@pytest.mark.distributed
def test_ddp_matches_one_device_with_the_group_made_by_the_strategy(tmp_path: Path) -> None:
    # run_ranks lets the strategy form and destroy the process group, as under torchrun.
    config = _config(tmp_path, "mlp", bucket_cap_mb=1.0, gradient_as_bucket_view=True)
    results = run_ranks(config, 2, tmp_path)
    assert [r.topology.rank for r in results] == [0, 1]
    losses_0, losses_1 = (r.losses for r in results[0].ranks)
    assert losses_0 != losses_1  # each rank trained on its own half of the batch
    assert_matches_reference(global_losses(results[0].ranks), merged_state(results), reference(config))
    fields = results[0].strategy_fields
    assert fields["backend"] == "gloo" and fields["per_rank_batch_size"] == 4
    assert fields["bucket_cap_mb"] == 1.0 and fields["gradient_as_bucket_view"] is True
    assert not dist.is_initialized()  # nothing leaked into this process


@pytest.mark.distributed
def test_ddp_matches_one_device_for_rnn_cnn_and_transformer_and_batchnorm_does_not(tmp_path: Path) -> None:
    configs = [
        _config(tmp_path, "rnn", static_graph=True),
        _config(tmp_path, "cnn", norm="group", find_unused_parameters=True),
        _config(tmp_path, "transformer"),
        _config(tmp_path, "cnn", norm="batch"),
    ]
    rnn, cnn_group, transformer, cnn_batch = run_ranks_sequence(configs, 2, tmp_path)
    for config, results in zip(configs[:3], (rnn, cnn_group, transformer), strict=True):
        assert len(global_losses(results[0].ranks)) == 3  # 1 warm-up + 2 timed optimizer steps
        assert_matches_reference(global_losses(results[0].ranks), merged_state(results), reference(config))
    # Both replicas end identical: DDP averaged the same gradients into both.
    for name, value in rnn[0].model_state.items():
        torch.testing.assert_close(rnn[1].model_state[name], value, rtol=0, atol=0)
    # BatchNorm normalises each rank's 4 samples with their own statistics, not the global 8's,
    # so split-batch training is a different computation from the first step on.
    losses = global_losses(cnn_batch[0].ranks)
    expected_losses, _ = reference(configs[3])
    assert abs(losses[0] - expected_losses[0]) > 1e-3, (losses[0], expected_losses[0])
    with pytest.raises(AssertionError):
        assert_matches_reference(losses, merged_state(cnn_batch), reference(configs[3]))


def test_torch_syncbatchnorm_refuses_cpu_tensors(tmp_path: Path) -> None:
    # Why --sync-batchnorm is refused on CPU: torch's own SyncBatchNorm raises as soon as it
    # runs in a process group, even a group of one.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        bn = torch.nn.SyncBatchNorm(3)
        with pytest.raises(ValueError, match="SyncBatchNorm expected input tensor to be on GPU"):
            bn(torch.randn(4, 3, 2, 2))
    finally:
        dist.destroy_process_group()


# --- bad inputs: one line, exit 2, nothing written ----------------------------------------


def _run_main(capsys: pytest.CaptureFixture[str], results: Path, *args: str) -> tuple[int, str]:
    results.write_text('{"kept": true}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--strategy", "ddp", "--model", "mlp", "--preset", "tiny", "--out", str(results), *args])
    assert results.read_text() == '{"kept": true}\n'
    return exit_info.value.code, capsys.readouterr().err


BAD_DDP = [
    (["--devices", "4", "--batch-size", "10"],
     "global batch 10 is not divisible by 4 data-parallel ranks; use a multiple of 4, e.g. 8 "
     "(--batch-size 10, --devices 4)"),
    (["--devices", "2", "--sync-batchnorm", "--model", "cnn", "--accelerator", "cpu"],
     "--sync-batchnorm needs CUDA: torch's SyncBatchNorm rejects CPU tensors"),
    (["--devices", "2", "--bucket-cap-mb", "0"], "--bucket-cap-mb must be positive, got 0.0"),
]


@pytest.mark.parametrize(("args", "message"), BAD_DDP, ids=[" ".join(a) for a, _ in BAD_DDP])
def test_bad_ddp_input_is_one_clear_line(
    args: list[str], message: str, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run_main(capsys, results, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert message in err


def test_more_processes_than_gpus_is_refused_before_launch(
    results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine with 2 GPUs, as far as the checks can tell; nothing reaches CUDA before they fail.
    monkeypatch.setattr("bench.harness.config.gpus_available", lambda: 2)
    code, err = _run_main(capsys, results, "--devices", "4", "--batch-size", "8", "--accelerator", "cuda")
    assert code == 2 and err.count("\n") == 1
    assert "4 processes on this node, one per GPU, but this machine has 2 GPU(s); use at most 2 per node" in err


def test_devices_must_match_torchrun_world_size(
    results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    code, err = _run_main(capsys, results, "--devices", "2")
    assert code == 2 and err.count("\n") == 1
    assert "--devices 2 does not match torchrun's world size 4 (--nnodes x --nproc-per-node); pass --devices 4" in err


def test_many_nodes_count_gpus_per_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # 2 nodes x 2 processes: --devices 4 on a 2-GPU machine is right, not "4 > 2 GPUs".
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("bench.harness.config.gpus_available", lambda: 2)
    config = resolve(RunConfig.from_flags(strategy="ddp", devices=4, batch_size=8, model="mlp", preset="tiny",
                                          accelerator="cuda", out=str(tmp_path / "r.jsonl")))
    assert config.run.devices == 4


# --- end to end under torchrun --------------------------------------------------------------


@pytest.mark.distributed
def test_bench_run_ddp_under_torchrun_writes_one_record_from_rank_0(ddp_run: BenchRun) -> None:
    proc = ddp_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ddp mlp/tiny on 2 cpu device(s) (emulated)") == 1  # rank 1 prints nothing
    records, bad = read_records(ddp_run.out)
    assert bad == [] and len(records) == 1
    record = records[0]
    assert record["processes"] == 2 and record["device_count"] == 2 and record["emulated"] is True
    assert record["oversubscribed"] is ((os.cpu_count() or 1) < 2)
    assert record["threads_per_process"] == [max(1, (os.cpu_count() or 1) // 2)] * 2
    assert record["global_batch_size"] == 8 and len(record["step_times_ms"]) == 3
    assert record["samples_per_s"] == pytest.approx(8 / (record["step_time_ms_median"] / 1e3))
    assert record["strategy_fields"] == {
        "backend": "gloo", "per_rank_batch_size": 4, "bucket_cap_mb": 25.0, "gradient_as_bucket_view": False,
        "static_graph": False, "find_unused_parameters": False, "sync_batchnorm": False,
    }


@pytest.mark.distributed
def test_a_crashing_rank_ends_the_whole_run_with_its_error(crashing_ddp_run: BenchRun) -> None:
    proc, out = crashing_ddp_run.proc, crashing_ddp_run.out
    marker = out.parent.name
    assert proc.returncode != 0
    assert "BENCH_FAULT: rank 1 fails at step 2 as asked" in proc.stderr
    assert crashing_ddp_run.seconds < 120
    assert not out.exists()
    # No worker outlives the run: none still names this run's output folder.
    survivors = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes().decode(errors="replace"):
                survivors.append(cmdline.parent.name)
        except OSError:
            continue
    assert survivors == []


def test_record_fields_are_json_clean() -> None:
    from strategies import build_strategy

    strategy = build_strategy("ddp", RunConfig.from_flags(strategy="ddp", devices=2, batch_size=8))
    rank = strategy.rank_fields(torch.nn.Linear(1, 1), Topology(devices=(torch.device("cpu"),)))
    fields = json.loads(json.dumps(strategy.record_fields(torch.nn.Linear(1, 1), [rank, rank])))
    assert fields["per_rank_batch_size"] == 4 and fields["bucket_cap_mb"] == 25.0


def test_gradient_buckets_are_consecutive_capped_and_one_dtype() -> None:
    from strategies.ddp import gradient_buckets

    def t(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, device="meta")

    # 4-byte floats, cap 40 bytes: 10 elements a bucket; an oversized tensor stands alone.
    params = [t(4), t(6), t(1), t(20), t(3), t(3, torch.float16), t(2, torch.float16)]
    assert gradient_buckets(params, 40) == [[0, 1], [2], [3], [4], [5, 6]]
    assert gradient_buckets([], 40) == []
