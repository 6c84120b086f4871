"""strategies/options.py: the option groups strategies read: their defaults, their keys, what each group holds."""

from __future__ import annotations

import dataclasses

import pytest

from strategies.options import (
    OPTION_GROUPS,
    BucketOptions,
    DDPOptions,
    FSDPOptions,
    MeshOptions,
    ModelFacts,
    PipelineOptions,
    RunOptions,
    SplitOptions,
)


def test_every_group_is_a_section_under_its_key_holding_its_flags() -> None:
    held = {group.key: [f.name for f in dataclasses.fields(group)] for group in OPTION_GROUPS}
    assert held == {
        "run": ["devices", "accelerator", "batch_size", "precision", "backend", "warmup"],
        "split": ["balance", "microbatches"],
        "pipeline": ["schedule", "stages_per_rank"],
        "mesh": ["dp", "dp_shard", "pp", "tp"],
        "buckets": ["bucket_cap_mb"],
        "ddp": ["gradient_as_bucket_view", "static_graph", "find_unused_parameters", "sync_batchnorm"],
        "fsdp": ["reshard_after_forward"],
    }


def test_the_defaults_are_the_documented_ones() -> None:
    assert RunOptions() == RunOptions(devices=1, accelerator="auto", batch_size=None, precision="auto", backend="auto",
                                      warmup=3)
    assert (SplitOptions().balance, SplitOptions().microbatches) == ("even", 1)
    assert (PipelineOptions().schedule, PipelineOptions().stages_per_rank) == ("gpipe", 1)
    assert dataclasses.astuple(MeshOptions()) == (None, None, None, None)  # hybrid fills them in from --devices
    assert BucketOptions().bucket_cap_mb == 25.0 and FSDPOptions().reshard_after_forward is True
    assert dataclasses.astuple(DDPOptions()) == (False, False, False, False)
    assert (ModelFacts(blocks=5, gpus=0).tp_plan, ModelFacts(blocks=5, gpus=0).layer_types) == (None, ())


def test_the_global_batch_is_the_resolved_batch_size_and_a_group_is_frozen_and_keyword_only() -> None:
    assert RunOptions(batch_size=32).global_batch == 32
    with pytest.raises(ValueError, match=r"^batch_size is filled in by resolve\(\) before a strategy runs$"):
        _ = RunOptions().global_batch
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunOptions().devices = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        SplitOptions("even", 2)  # type: ignore[misc]
