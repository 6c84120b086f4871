"""Splitting and balancing: pure functions, checked against literal tables."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from strategies.partition import (
    balance_by_cost,
    check_balance,
    even_balance,
    parameter_counts,
    split_sequential,
)


@pytest.mark.parametrize(
    ("blocks", "stages", "expected"),
    [(7, 3, [3, 2, 2]), (8, 2, [4, 4]), (5, 5, [1, 1, 1, 1, 1]), (10, 4, [3, 3, 2, 2]), (3, 1, [3])],
)
def test_even_balance(blocks: int, stages: int, expected: list[int]) -> None:
    assert even_balance(blocks, stages) == expected


@pytest.mark.parametrize(
    ("costs", "stages", "expected"),
    [
        ([1, 1, 1, 1], 2, [2, 2]),
        ([5, 1, 1, 1, 1], 2, [1, 4]),
        ([1, 1, 1, 1, 5], 2, [4, 1]),
        ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3, [5, 2, 2]),  # stage costs 15, 13, 17: the best max is 17
        ([10, 0, 0, 10], 2, [1, 3]),
        ([3, 3, 3], 3, [1, 1, 1]),
    ],
)
def test_balance_by_cost_minimises_the_slowest_stage(costs: list[float], stages: int, expected: list[int]) -> None:
    assert balance_by_cost(costs, stages) == expected


def test_balance_by_cost_is_optimal_against_brute_force() -> None:
    import itertools

    costs = [4, 1, 7, 2, 2, 9, 1, 3]
    for stages in range(1, 5):
        got = balance_by_cost(costs, stages)
        best = min(
            max(sum(costs[a:b]) for a, b in zip((0, *cuts), (*cuts, len(costs)), strict=True))
            for cuts in itertools.combinations(range(1, len(costs)), stages - 1)
        )
        starts = [sum(got[:i]) for i in range(stages)]
        assert max(sum(costs[s : s + n]) for s, n in zip(starts, got, strict=True)) == best


@pytest.mark.parametrize(
    ("balance", "blocks", "message"),
    [
        ([3, 2], 7, "sums to 5, but the model has 7 blocks"),
        ([3, 0, 4], 7, "fewer than 1 block"),
        ([], 7, "empty"),
    ],
)
def test_check_balance_names_the_numbers(balance: list[int], blocks: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_balance(balance, blocks)


def test_more_stages_than_blocks_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot split 3 blocks into 4 stages"):
        even_balance(3, 4)
    with pytest.raises(ValueError, match="cannot split 3 blocks into 4 stages"):
        balance_by_cost([1, 1, 1], 4)


def test_split_sequential_shares_modules_and_composes() -> None:
    blocks = nn.Sequential(*(nn.Linear(4, 4) for _ in range(5)))
    stages = split_sequential(blocks, [2, 3])
    assert [len(s) for s in stages] == [2, 3]
    assert stages[1][0] is blocks[2]
    x = torch.randn(3, 4)
    torch.testing.assert_close(stages[1](stages[0](x)), blocks(x), rtol=0, atol=0)
    assert parameter_counts(blocks) == [20] * 5
