"""strategies/stages.py: a split checked against the model and the batch, and the blocks per stage of --balance."""

from __future__ import annotations

import pytest
import torch

import models
from strategies.errors import ConfigError
from strategies.stages import check_split, stage_balance


@pytest.mark.parametrize(("balance", "batch", "microbatches", "message"), [
    ("3,3", 8, 1, "balance [3, 3] sums to 6, but the model has 7 blocks"),
    ("2,2,3", 8, 1, "balance [2, 2, 3] has 3 stages, but the run has 2"),
    ("even", 8, 3, "global batch 8 is not divisible by 3 micro-batches"),
    ("4,3", 8, 16, "global batch 8 has fewer samples than --microbatches 16"),
    ("4,3", 8, 4, None),
])
def test_a_split_is_checked_against_the_blocks_and_the_batch_as_one_line(
    balance: str, batch: int, microbatches: int, message: str | None
) -> None:
    if message is None:
        check_split(balance, 7, 2, batch, microbatches)
        return
    with pytest.raises(ConfigError) as refused:
        check_split(balance, 7, 2, batch, microbatches)
    assert str(refused.value) == message


def test_the_balance_modes_cut_the_tiny_mlp_as_each_says() -> None:
    spec = models.build_model("mlp", "tiny")  # 4 hidden blocks of 1056 parameters, then a head of 330
    cpu = torch.device("cpu")
    assert stage_balance("even", spec, 3, 4, cpu) == [2, 2, 1]
    assert stage_balance("params", spec, 3, 4, cpu) == [1, 2, 2]  # the light head joins the last hidden block
    assert stage_balance("3,1,1", spec, 3, 4, cpu) == [3, 1, 1]
