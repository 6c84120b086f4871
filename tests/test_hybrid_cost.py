"""strategies/hybrid_cost.py: every mesh hybrid runs, priced as its pipeline with its other dimensions' costs."""

from __future__ import annotations

import dataclasses

import pytest

from bench.predict.costs import predict_memory, predict_step
from bench.predict.curves import Curve
from bench.predict.scenario import Scenario
from tests.helpers.calibrations import FREE, equal_blocks


def _mesh(devices: int, m: int = 4, **degrees: int) -> Scenario:
    """hybrid on ``devices`` ranks of 4 equal blocks (the tp plan splitting every one, one pair each)."""
    tp = {"tp_blocks": (0, 1, 2, 3), "tp_pairs": (1,) * 4, "tp_layers": (2,) * 4} if degrees.get("tp", 1) > 1 else {}
    full = {"dp": 1, "dp_shard": 1, "pp": 1, "tp": 1, **degrees}
    return Scenario("hybrid", devices, 8 * m * full["dp"] * full["dp_shard"], microbatches=m, **full, **tp)


def test_every_mesh_hybrid_runs_is_priced_as_its_pipeline_with_the_collectives_of_its_other_dimensions() -> None:
    free = dataclasses.replace(equal_blocks(4), slowdown={2: 1.0, 4: 1.0, 8: 1.0})  # 8 ranks compute as fast
    pipeline = predict_step(free, Scenario("pp", 2, 32, microbatches=4), 1).step_ms
    assert pipeline == pytest.approx((4 + 2 - 1) * 2 * 3.0)  # m + p - 1 slots of 2 blocks' F + B
    # With free collectives, a replica or an FSDP shard of the batch costs what one pipeline of its share does,
    # and tp halves the compute of the blocks its plan splits.
    assert predict_step(free, _mesh(4, dp=2, pp=2), 1).step_ms == pytest.approx(pipeline)
    assert predict_step(free, _mesh(4, dp_shard=2, pp=2), 1).step_ms == pytest.approx(pipeline)
    assert predict_step(free, _mesh(4, tp=2, pp=2), 1).step_ms == pytest.approx(pipeline / 2)
    assert predict_step(free, _mesh(8, dp_shard=2, tp=2, pp=2), 1).step_ms == pytest.approx(pipeline / 2)
    # Each collective 0.5 ms: FSDP gathers the stage's 2 blocks before each forward and again before each
    # backward (5 slots of F + B on the critical path), then reduce-scatters the stage's gradients once;
    # the activation crosses the one boundary forward and its gradient back (2 transfers on the path).
    half = {name: Curve([(1, 0.5), (2**30, 0.5)]) for name in FREE}
    costly = dataclasses.replace(equal_blocks(4, curves=half), slowdown=free.slowdown)
    sharded = predict_step(costly, _mesh(4, dp_shard=2, pp=2), 1)
    assert sharded.step_ms == pytest.approx((4 + 2 - 1) * (2 * 3.0 + 2 * 2 * 0.5) + 2 * 0.5 + 0.5)
    # tp: one all-reduce per pair per block forward and backward (2 blocks a stage), and no gradient sync
    tensor = predict_step(costly, _mesh(4, tp=2, pp=2), 1).step_ms
    assert tensor == pytest.approx((4 + 2 - 1) * (3.0 + 2 * 2 * 0.5) + 2 * 0.5)
    # HSDP: dp replicas beside the shards all-reduce each shard's gradients after the reduce-scatter
    both = predict_step(costly, _mesh(8, dp=2, dp_shard=2, pp=2), 1).step_ms
    assert both == pytest.approx(sharded.step_ms + 0.5)


def test_a_mesh_holds_its_stage_split_over_tp_and_sharded_over_dp_shard() -> None:
    blocks = equal_blocks(4).blocks(1)
    replicated = predict_memory(blocks, _mesh(4, dp=2, pp=2), 1)
    sharded = predict_memory(blocks, _mesh(4, dp_shard=2, pp=2), 1)
    split = predict_memory(blocks, _mesh(4, tp=2, pp=2), 1)
    # bytes: 2 blocks of 1000 fp32 parameters a stage
    assert replicated["parameters"] == 2 * 4000 and sharded["parameters"] == split["parameters"] == 4000
    assert sharded["optimizer_state"] == replicated["optimizer_state"] / 2
    assert sharded["gathered_parameters"] == 4000  # one whole block gathered at a time


def test_tps_and_fsdps_runtime_terms_are_paid_once_a_step_on_each_ranks_own_layers_in_a_mesh() -> None:
    """tp's per-layer and fsdp's per-block terms are fitted on steps of one forward and one backward, and a mesh
    pays them as tp and fsdp do: once a step, each rank for its own layers and blocks, whatever the micro-batches
    (paid in every forward and backward: +63% on dp_shard 2 x tp 2, +146% on pp 2 x tp 2 at 4 micro-batches);
    fully_shard's hooks run on replicas alone too (HSDP over one shard)."""
    from strategies.cost_model import RuntimeOverheads

    free = dataclasses.replace(equal_blocks(4), slowdown={4: 1.0})
    terms = RuntimeOverheads(tp_per_layer=0.25, fsdp_per_block=0.5)
    costly = dataclasses.replace(free, communication={4: free.communication[2]}).with_runtime(4, terms)
    for mesh, per_step in ((_mesh(4, m=1, dp_shard=2, tp=2), 0.25 * 8 + 0.5 * 4),  # 4 blocks of 2 tp layers
                           (_mesh(4, m=1, dp=2, tp=2), 0.25 * 8 + 0.5 * 4),  # HSDP over one shard
                           (_mesh(4, m=1, tp=4), 0.25 * 8),  # no data parallelism: no fully_shard
                           (_mesh(4, m=1, pp=2, tp=2), 0.25 * 4),  # each rank 2 blocks of the 4
                           (_mesh(4, m=4, pp=2, tp=2), 0.25 * 4)):  # 4 micro-batches: the same, once
        assert predict_step(costly, mesh, 1).step_ms == pytest.approx(predict_step(free, mesh, 1).step_ms + per_step)
