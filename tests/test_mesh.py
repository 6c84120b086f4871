"""``MeshLayout``: the degrees of a run as literal tables, and the arithmetic in its messages (strategies/mesh.py)."""

from __future__ import annotations

import re

import pytest

from strategies.mesh import MeshLayout


@pytest.mark.parametrize(
    ("devices", "dp", "pp", "dp_shard", "tp", "expected"),
    [
        (4, None, None, None, None, (2, 1, 2, 1)),  # nothing given: pp = 2, so that sweeps plan hybrid at 4 devices
        (8, None, None, None, None, (4, 1, 2, 1)),
        (8, 2, None, None, None, (2, 1, 4, 1)),
        (8, None, 4, None, None, (2, 1, 4, 1)),
        (6, 3, 2, None, None, (3, 1, 2, 1)),
        (2, 1, 2, None, None, (1, 1, 2, 1)),
        (4, None, None, 2, 2, (1, 2, 1, 2)),  # dp-shard or tp given: pp 1 unless asked for
        (8, None, None, 2, 2, (2, 2, 1, 2)),
        (8, None, 2, 2, None, (2, 2, 2, 1)),
        (8, 1, None, 2, 2, (1, 2, 2, 2)),
        (8, None, None, 4, None, (2, 4, 1, 1)),
    ],
)
def test_degrees_for_devices(devices: int, dp: int | None, pp: int | None, dp_shard: int | None, tp: int | None,
                             expected: tuple[int, int, int, int]) -> None:
    layout = MeshLayout.for_devices(devices, dp, pp, dp_shard, tp)
    assert layout.shape == expected and layout.devices == devices


@pytest.mark.parametrize(
    ("devices", "dp", "pp", "dp_shard", "tp", "message"),
    [
        (8, 2, 2, None, None, "dp(2) * dp_shard(1) * pp(2) * tp(1) = 4 != devices(8)"),
        (5, None, None, None, None, "dp(2) * dp_shard(1) * pp(2) * tp(1) = 4 != devices(5)"),
        (6, 4, None, None, None, "dp(4) * dp_shard(1) * pp(1) * tp(1) = 4 != devices(6)"),
        (4, 2, 2, None, 2, "dp(2) * dp_shard(1) * pp(2) * tp(2) = 8 != devices(4); choose --dp, --dp-shard, --pp, "
                           "--tp whose product is --devices"),
        (4, None, None, 3, None, "dp(1) * dp_shard(3) * pp(1) * tp(1) = 3 != devices(4)"),
    ],
)
def test_a_bad_product_shows_the_arithmetic(devices: int, dp: int | None, pp: int | None, dp_shard: int | None,
                                            tp: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        MeshLayout.for_devices(devices, dp, pp, dp_shard, tp)


def test_rank_layout_puts_pp_innermost_of_dp_x_pp() -> None:
    # rank -> (replica, shard, stage rank, tp rank) on a 2 x 3 mesh: one pipeline holds consecutive ranks.
    table = {0: (0, 0, 0, 0), 1: (0, 0, 1, 0), 2: (0, 0, 2, 0), 3: (1, 0, 0, 0), 4: (1, 0, 1, 0), 5: (1, 0, 2, 0)}
    assert {r: MeshLayout(2, 3).coords(r) for r in range(6)} == table
    assert MeshLayout(2, 3).ranks() == [[0, 1, 2], [3, 4, 5]]
    assert MeshLayout(3, 2).ranks() == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="rank 6 is outside a 2 x 1 x 3 x 1 mesh"):
        MeshLayout(2, 3).coords(6)


def test_rank_layout_of_four_dims_puts_tp_innermost() -> None:
    # dp 2 x dp_shard 2 x pp 2 x tp 2: rank = ((replica * 2 + shard) * 2 + stage) * 2 + tp rank.
    layout = MeshLayout(dp=2, pp=2, dp_shard=2, tp=2)
    assert [tuple(layout.coords(r)) for r in (0, 1, 2, 5, 6, 11, 15)] == [
        (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 1), (0, 1, 1, 0), (1, 0, 1, 1), (1, 1, 1, 1)]
    assert [layout.data_index(r) for r in range(16)] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert layout.grid_dims == ("dp", "dp_shard", "pp", "tp")
    assert layout.ranks()[1][0] == [[8, 9], [10, 11]]
    # Dims of one rank drop out of the grid: dp-shard 2 x tp 2 is a 2 x 2 grid, tp rows of consecutive ranks.
    small = MeshLayout(dp=1, pp=1, dp_shard=2, tp=2)
    assert (small.grid_dims, small.ranks()) == (("dp_shard", "tp"), [[0, 1], [2, 3]])
    assert [small.data_index(r) for r in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("layout", "averages", "fsdp_dims"),
    [
        (MeshLayout(dp=2, pp=2), True, ()),  # pure dp x pp: plain gradients averaged over replicas
        (MeshLayout(dp=1, pp=2, dp_shard=2), False, ("dp_shard",)),
        (MeshLayout(dp=2, pp=1, dp_shard=2), False, ("dp", "dp_shard")),  # HSDP
        (MeshLayout(dp=2, pp=1, tp=2), False, ("dp", "dp_shard")),  # replicas of TP's DTensors: HSDP, shard of 1
        (MeshLayout(dp=1, pp=2, tp=2), False, ()),  # no data parallelism
        (MeshLayout(dp=4, pp=1), False, ("dp", "dp_shard")),
    ],
)
def test_which_dims_reduce_the_gradients(layout: MeshLayout, averages: bool, fsdp_dims: tuple[str, ...]) -> None:
    assert (layout.averages_replicas, layout.fsdp_dims) == (averages, fsdp_dims)
