"""``MeshLayout``: the degrees of a run as literal tables, and the arithmetic in its messages (strategies/mesh.py)."""

from __future__ import annotations

import re

import pytest

from strategies.mesh import MeshLayout


@pytest.mark.parametrize(
    ("devices", "dp", "pp", "expected"),
    [
        (4, None, None, (2, 2)),  # neither given: pp = 2, so that sweeps plan hybrid at 4 devices
        (8, None, None, (4, 2)),
        (8, 2, None, (2, 4)),
        (8, None, 4, (2, 4)),
        (6, 3, 2, (3, 2)),
        (2, 1, 2, (1, 2)),
    ],
)
def test_degrees_for_devices(devices: int, dp: int | None, pp: int | None, expected: tuple[int, int]) -> None:
    layout = MeshLayout.for_devices(devices, dp, pp)
    assert (layout.dp, layout.pp) == expected and layout.devices == devices


@pytest.mark.parametrize(
    ("devices", "dp", "pp", "message"),
    [
        (8, 2, 2, "dp(2) * pp(2) != devices(8)"),
        (5, None, None, "dp(2) * pp(2) != devices(5)"),
        (6, 4, None, "dp(4) * pp(1) != devices(6)"),
    ],
)
def test_a_bad_product_shows_the_arithmetic(devices: int, dp: int | None, pp: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        MeshLayout.for_devices(devices, dp, pp)


def test_rank_layout_puts_pp_innermost() -> None:
    # rank -> (replica, stage rank) on a 2 x 3 mesh: one pipeline holds consecutive ranks.
    table = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (1, 0), 4: (1, 1), 5: (1, 2)}
    assert {r: MeshLayout(2, 3).coords(r) for r in range(6)} == table
    assert MeshLayout(2, 3).ranks() == [[0, 1, 2], [3, 4, 5]]
    assert MeshLayout(3, 2).ranks() == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="rank 6 is outside a 2 x 3 mesh"):
        MeshLayout(2, 3).coords(6)
