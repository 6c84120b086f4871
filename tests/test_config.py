"""The run's configuration: option groups owned by strategies, one refusal for the rest, validated once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import bench.cli
import bench.harness.config
from bench.harness.cli_args import flag_fields
from bench.harness.config import RunConfig, from_json, resolve, to_json, unread_groups_reset
from bench.harness.launch import RESOLVED_CONFIG_VARIABLE
from strategies import STRATEGIES, ConfigError, build_strategy, readers
from strategies.options import OPTION_GROUPS, DDPOptions, FSDPOptions, PipelineOptions, RunOptions, SplitOptions

GROUP_FIELDS = {f.name for group in OPTION_GROUPS for f in dataclasses.fields(group)}


def test_every_group_is_a_section_of_the_run_config_under_its_key_and_each_field_one_flag() -> None:
    config = RunConfig.from_flags(microbatches=8, schedule="1f1b", model="mlp")
    assert all(config.group(group) == getattr(config, group.key) for group in OPTION_GROUPS)
    assert config.split.microbatches == 8 and config.pipeline.schedule == "1f1b" and config.workload.model == "mlp"
    flags = [f.name for f in flag_fields(RunConfig)]
    assert len(flags) == len(set(flags)) and set(flags) >= GROUP_FIELDS and list(config.as_dict()) == flags
    with pytest.raises(TypeError, match="no flag microbatch"):
        config.with_flags(microbatch=4)


def test_a_strategy_receives_exactly_the_groups_it_reads() -> None:
    config = RunConfig.from_flags(strategy="pp", devices=2, microbatches=4, schedule="1f1b")
    pp = build_strategy("pp", config)
    assert pp.run == config.group(RunOptions)
    assert pp.split == SplitOptions(microbatches=4) and pp.pipeline == PipelineOptions(schedule="1f1b")
    assert not hasattr(pp, "ddp") and not hasattr(pp, "config")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"strategy": "mp", "devices": 2, "schedule": "1f1b"}, "--schedule 1f1b is for pp, hybrid, not mp"),
        ({"strategy": "dp", "sync_batchnorm": True}, "--sync-batchnorm is for ddp, zero1, not dp"),
        ({"strategy": "single", "microbatches": 2}, "--microbatches 2 is for mp, pp, hybrid, not single"),
        ({"strategy": "pp", "devices": 2, "dp": 2}, "--dp 2 is for hybrid, not pp"),
        ({"strategy": "hybrid", "devices": 4, "static_graph": True}, "--static-graph is for ddp, zero1, not hybrid"),
    ],
)
def test_a_flag_of_a_group_the_strategy_does_not_read_is_refused_naming_who_reads_it(
    changes: dict, message: str, tmp_path: Path
) -> None:
    config = RunConfig.from_flags(model="mlp", preset="tiny", out=str(tmp_path / "r.jsonl"), **changes)
    with pytest.raises(ConfigError) as refused:
        resolve(config)
    assert str(refused.value) == message


def test_readers_follow_the_declarations() -> None:
    assert readers(DDPOptions) == ["ddp", "zero1"]
    assert readers(FSDPOptions) == ["fsdp"]
    assert readers(RunOptions) == list(STRATEGIES)


def test_unread_groups_go_back_to_their_defaults() -> None:
    config = RunConfig.from_flags(strategy="ddp", devices=2, microbatches=4, schedule="1f1b", bucket_cap_mb=50.0)
    reset = unread_groups_reset(config)
    assert reset.split.microbatches == 1 and reset.pipeline.schedule == "gpipe"
    assert reset.buckets.bucket_cap_mb == 50.0 and reset.run.devices == 2


def test_the_resolved_config_survives_json() -> None:
    config = resolve(RunConfig.from_flags(strategy="pp", model="mlp", preset="tiny", devices=2, microbatches=4))
    assert from_json(to_json(config)) == config


def test_a_torchrun_worker_takes_its_launchers_resolved_config_without_validating_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = resolve(RunConfig.from_flags(strategy="pp", model="mlp", preset="tiny", devices=2, microbatches=4))
    args = bench.cli.build_parser().parse_args(["run", "--strategy", "pp", "--devices", "2"])
    monkeypatch.setattr(bench.cli, "resolve", lambda _: pytest.fail("a worker validated its command line again"))
    monkeypatch.setenv(RESOLVED_CONFIG_VARIABLE, to_json(config))
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    assert bench.cli.run_config(args) == config
    # A user's own torchrun passes no resolved config: its workers validate their flags.
    monkeypatch.delenv(RESOLVED_CONFIG_VARIABLE)
    with pytest.raises(pytest.fail.Exception, match="validated its command line again"):
        bench.cli.run_config(args)


@pytest.mark.parametrize(("model", "accelerator", "refused"), [
    ("cnn", "cuda", True),  # the ResNet's AdaptiveAvgPool2d: no deterministic CUDA backward
    ("cnn", "cpu", False),
    ("mlp", "cuda", False),
    ("transformer", "cuda", False),
])
def test_deterministic_is_refused_on_cuda_for_a_model_torch_would_raise_on(
    model: str, accelerator: str, refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The device kind faked: resolve reads the GPUs present through gpus_available, and builds nothing on them.
    monkeypatch.setattr(bench.harness.config, "gpus_available", lambda: 1)
    config = RunConfig.from_flags(model=model, preset="tiny", deterministic=True, accelerator=accelerator,
                                  precision="fp32", out=str(tmp_path / "r.jsonl"))
    if not refused:
        assert resolve(config).knobs.deterministic
        return
    with pytest.raises(ConfigError) as refusal:
        resolve(config)
    assert str(refusal.value) == ("--deterministic on CUDA: model 'cnn' has AdaptiveAvgPool2d, whose CUDA backward "
                                  "has no deterministic kernel (torch would raise at the first step); drop "
                                  "--deterministic")


def test_the_cnn_without_deterministic_resolves_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.harness.config, "gpus_available", lambda: 1)
    config = resolve(RunConfig.from_flags(model="cnn", preset="tiny", accelerator="cuda",
                                          out=str(tmp_path / "r.jsonl")))
    assert (config.run.accelerator, config.run.precision, config.knobs.channels_last) == ("cuda", "bf16", True)


@pytest.mark.parametrize(("changes", "message"), [
    ({"model": "mlp"}, "--sync-batchnorm: model 'mlp' has no BatchNorm layer to synchronise; drop the flag"),
    ({"norm": "group"}, "--sync-batchnorm: model 'cnn' has no BatchNorm layer to synchronise; drop the flag"),
    ({"devices": 1}, "--sync-batchnorm with --devices 1: one replica has no other batch statistics to gather; "
                     "use --devices 2 or more"),
    ({"accelerator": "cpu"}, "--sync-batchnorm needs CUDA: torch's SyncBatchNorm rejects CPU tensors, so it cannot "
                             "run on gloo/CPU"),
    ({}, None),  # the cnn's BatchNorm over 2 CUDA replicas: resolved, and tests/test_gpu.py runs it
])
def test_sync_batchnorm_runs_only_where_it_synchronises_something(
    changes: dict, message: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: mlp, group norm and one replica were accepted and recorded as synchronised, with nothing to sync.
    monkeypatch.setattr(bench.harness.config, "gpus_available", lambda: 2)
    config = RunConfig.from_flags(**{"strategy": "ddp", "model": "cnn", "preset": "tiny", "devices": 2,
                                  "accelerator": "cuda",
                       "sync_batchnorm": True, "out": str(tmp_path / "r.jsonl"), **changes})
    if message is None:
        assert resolve(config).ddp.sync_batchnorm
        return
    with pytest.raises(ConfigError) as refusal:
        resolve(config)
    assert str(refusal.value) == message
