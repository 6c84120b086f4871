"""strategies/stage_split.py: which blocks each stage holds, and what the fullest pipeline rank keeps."""

from __future__ import annotations

from bench.predict.scenario import Scenario
from strategies.stage_split import largest_stage, stage_blocks
from tests.helpers.calibrations import equal_blocks


def test_stages_follow_the_balance_rule() -> None:
    blocks = equal_blocks(5).blocks(1)
    assert stage_blocks(blocks, "even", 2, 4) == [[0, 1, 2], [3, 4]]
    assert stage_blocks(blocks, "1,4", 2, 4) == [[0], [1, 2, 3, 4]]


def test_the_fullest_rank_keeps_every_micro_batch_under_fill_and_drain_and_at_most_p_under_the_others() -> None:
    blocks = equal_blocks(4).blocks(1)  # 1000 parameters and 10 bytes saved a sample each
    scenario = Scenario("pp", 2, 64, microbatches=8, schedule="gpipe")
    per_microbatch = 2 * 10 * 8  # 2 blocks a rank, micro-batches of 8 samples
    fill_drain = largest_stage(blocks, scenario, states=1, replicas=1, all_in_flight=True)
    assert fill_drain["activations"] == 8 * per_microbatch
    assert fill_drain["parameters"] == fill_drain["optimizer_state"] == 4 * 2000  # fp32, one state a parameter
    assert largest_stage(blocks, scenario, 1, 1, all_in_flight=False)["activations"] == 2 * per_microbatch  # rank 0
    # two pipelines of 2 ranks side by side on 4 devices: each takes half the batch, micro-batches of 4 samples
    side_by_side = largest_stage(blocks, Scenario("pp", 4, 64, microbatches=8, schedule="gpipe"), 1, replicas=2,
                                 all_in_flight=True)
    assert side_by_side["activations"] == 8 * per_microbatch // 2
