"""strategies/composition.py: hybrid's degrees checked before any process starts, and the runs it is held against."""

from __future__ import annotations

import pytest

from strategies.composition import check_fsdp_schedule, check_mesh, comparison_parts, layout_of
from strategies.errors import ConfigError
from strategies.mesh import MeshLayout
from strategies.options import MeshOptions, ModelFacts, PipelineOptions, RunOptions, SplitOptions

FACTS = ModelFacts(blocks=5, gpus=0)


def test_the_layout_fills_in_missing_degrees_and_refuses_a_product_other_than_devices() -> None:
    assert layout_of(RunOptions(devices=4), MeshOptions()) == MeshLayout(dp=2, pp=2)
    assert layout_of(RunOptions(devices=8), MeshOptions(dp_shard=2, tp=2)) == MeshLayout(dp=2, pp=1, dp_shard=2, tp=2)
    with pytest.raises(ConfigError) as refused:
        layout_of(RunOptions(devices=4), MeshOptions(dp=3))
    assert str(refused.value) == ("dp(3) * dp_shard(1) * pp(1) * tp(1) = 3 != devices(4); "
                                  "choose --dp, --dp-shard, --pp, --tp whose product is --devices")


@pytest.mark.parametrize(("batch", "microbatches", "layout", "message"), [
    (6, 2, MeshLayout(dp=2, pp=2), "global batch 6 is not divisible by 4 (2 data-parallel replicas x 2 micro-batches); "
                                   "use a multiple of 4, e.g. 4"),
    (6, 1, MeshLayout(dp=2, pp=1, dp_shard=2), "global batch 6 is not divisible by 4 (2 replicas x 2 FSDP shards x 1 "
                                               "micro-batches); use a multiple of 4, e.g. 4"),
    (8, 2, MeshLayout(dp=2, pp=1, dp_shard=2), "--microbatches 2 splits a pipeline's batch, and --pp 1 has no "
                                               "pipeline; leave --microbatches at 1"),
    (8, 2, MeshLayout(dp=2, pp=2), None),
])
def test_the_mesh_checks_name_the_arithmetic_that_fails(batch: int, microbatches: int, layout: MeshLayout,
                                                         message: str | None) -> None:
    run = RunOptions(devices=layout.devices, batch_size=batch)
    if message is None:
        check_mesh(run, SplitOptions(microbatches=microbatches), layout, FACTS)
        return
    with pytest.raises(ConfigError) as refused:
        check_mesh(run, SplitOptions(microbatches=microbatches), layout, FACTS)
    assert str(refused.value) == message


def test_a_zero_bubble_schedule_is_refused_only_where_fsdp_shards_the_stages() -> None:
    zero_bubble = PipelineOptions(schedule="interleaved-zb", stages_per_rank=2)
    check_fsdp_schedule(zero_bubble, MeshLayout(dp=2, pp=2))  # dp x pp averages plain gradients: admitted
    check_fsdp_schedule(PipelineOptions(schedule="1f1b"), MeshLayout(dp=1, pp=2, dp_shard=2))
    with pytest.raises(ConfigError, match=r"^schedule 'interleaved-zb' splits each backward .* \(over dp-shard\)"):
        check_fsdp_schedule(zero_bubble, MeshLayout(dp=1, pp=2, dp_shard=2))


def test_pure_dp_x_pp_is_compared_with_ddp_and_pp_at_its_per_device_batch_and_other_meshes_with_none() -> None:
    run, split, pipeline = RunOptions(devices=4, batch_size=16), SplitOptions(microbatches=4), PipelineOptions(
        schedule="1f1b")
    assert comparison_parts(run, split, pipeline, MeshLayout(dp=2, pp=2)) == {
        "ddp": {"strategy": "ddp", "devices": 2, "batch_size": 8},
        "pp": {"strategy": "pp", "devices": 2, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
               "stages_per_rank": 1},
    }
    assert comparison_parts(run, split, pipeline, MeshLayout(dp=1, pp=2, dp_shard=2)) == {}
