"""bench/predict/scenario.py: a resolved run configuration as the Scenario its strategy's cost model prices."""

from __future__ import annotations

import dataclasses

import models
from bench.harness.config import RunConfig, resolve
from bench.predict.scenario import Scenario, scenario_for

BATCH = 32 * 4 + 8
"""The tiny mlp's bytes a sample: 32 fp32 features and an int64 label."""


def _scenario(**flags: object) -> Scenario:
    """The scenario without its counted backward peaks (``test_the_scenario_counts_each_blocks_backward_peak``)."""
    return dataclasses.replace(_counted(**flags), backward_peaks=())


def _counted(**flags: object) -> Scenario:
    return scenario_for(resolve(RunConfig.from_flags(model="mlp", preset="tiny", accelerator="cpu", batch_size=16,
                                                     **flags)))


def test_the_scenario_counts_each_blocks_backward_peak() -> None:
    blocks = len(models.build_model("mlp", "tiny").blocks)
    peaks = _counted(strategy="ddp", devices=2).backward_peaks
    assert len(peaks) == blocks
    # a Linear's backward makes its weight's gradient (fixed) and its input's (per sample), as temporaries
    assert all(p.temporaries.fixed > 0 for p in peaks) and peaks[1].temporaries.per_sample > 0


def test_the_scenario_keeps_each_option_that_changes_a_runs_cost() -> None:
    assert _scenario(strategy="ddp", devices=2, bucket_cap_mb=1.5) == Scenario(
        "ddp", 2, 16, bucket_cap_mb=1.5, batch_bytes_per_sample=BATCH)
    assert _scenario(strategy="fsdp", devices=2, reshard_after_forward=False) == Scenario(
        "fsdp", 2, 16, reshard_after_forward=False, batch_bytes_per_sample=BATCH)
    assert _scenario(strategy="pp", devices=2, microbatches=4, schedule="interleaved-1f1b", stages_per_rank=2,
                     balance="params") == Scenario("pp", 2, 16, microbatches=4, schedule="interleaved-1f1b",
                                                   stages_per_rank=2, balance="params", batch_bytes_per_sample=BATCH)


def test_hybrids_scenario_carries_its_mesh_and_tps_the_layers_its_plan_splits() -> None:
    assert _scenario(strategy="hybrid", devices=4, dp=2, pp=2, microbatches=2) == Scenario(
        "hybrid", 4, 16, microbatches=2, dp=2, pp=2, dp_shard=1, tp=1, batch_bytes_per_sample=BATCH)
    tp = _scenario(strategy="tp", devices=2)
    assert (tp.strategy, tp.devices, tp.global_batch) == ("tp", 2, 16)
    assert tp.tp_blocks and len(tp.tp_pairs) == len(tp.tp_layers) == len(tp.tp_blocks) and sum(tp.tp_layers) > 0
