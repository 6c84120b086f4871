"""bench/harness/sections.py: the harness's own sections of a run's configuration, each under its key."""

from __future__ import annotations

import dataclasses

import pytest

from bench.harness.config import SECTIONS, RunConfig
from bench.harness.sections import CheckpointOptions, KnobOptions, MeasureOptions, WorkloadOptions

HARNESS = (WorkloadOptions, MeasureOptions, KnobOptions, CheckpointOptions)


def test_each_section_sits_in_the_run_configuration_under_its_key() -> None:
    assert all(SECTIONS[section.key] is section for section in HARNESS)
    config = RunConfig.from_flags(model="mlp", steps=4, compile=True, save_checkpoint="c.pt")
    assert (config.workload.model, config.measure.steps, config.knobs.compile, config.checkpoint.save_checkpoint) \
        == ("mlp", 4, True, "c.pt")
    assert config.workload.lr == 0.01 and config.measure.out == "results/results.jsonl"  # the rest at defaults


def test_the_defaults_are_the_ones_the_flags_document() -> None:
    assert WorkloadOptions() == WorkloadOptions(model="cnn", preset="small", norm="batch", seed=0, optimizer="sgd",
                                                lr=0.01)
    assert (MeasureOptions().steps, MeasureOptions().timeout_s, MeasureOptions().max_restarts) == (10, 300.0, 0)
    assert KnobOptions().channels_last is None  # decided per model and machine when the run resolves
    assert CheckpointOptions() == CheckpointOptions(save_checkpoint=None, load_checkpoint=None)


def test_a_section_is_frozen_and_takes_keywords_only() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        WorkloadOptions().model = "mlp"  # type: ignore[misc]
    with pytest.raises(TypeError):
        MeasureOptions(5)  # type: ignore[misc]
