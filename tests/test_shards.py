"""Shards of a global batch: contiguous, disjoint, covering, and refused with the numbers (strategies/shards.py)."""

from __future__ import annotations

import pytest

from strategies.shards import check_divisible, shard_range


@pytest.mark.parametrize(
    ("batch", "world", "expected"),
    [
        (8, 2, [(0, 4), (4, 8)]),
        (12, 3, [(0, 4), (4, 8), (8, 12)]),
        (6, 6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]),
        (5, 1, [(0, 5)]),
    ],
)
def test_shards_are_contiguous_disjoint_and_cover_the_batch(
    batch: int, world: int, expected: list[tuple[int, int]]
) -> None:
    shards = [shard_range(batch, rank, world) for rank in range(world)]
    assert shards == expected
    covered = [i for start, stop in shards for i in range(start, stop)]
    assert covered == list(range(batch))  # each sample exactly once, in order


@pytest.mark.parametrize(
    ("batch", "world", "message"),
    [(10, 4, "global batch 10 is not divisible by 4 data-parallel ranks; use a multiple of 4, e.g. 8"),
     (3, 4, "global batch 3 is not divisible by 4 data-parallel ranks")],
)
def test_indivisible_batches_are_refused_naming_the_numbers(batch: int, world: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_divisible(batch, world)
    with pytest.raises(ValueError, match="not divisible"):
        shard_range(batch, 0, world)


def test_a_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(ValueError, match="rank 2 is outside a world of 2"):
        shard_range(8, 2, 2)
