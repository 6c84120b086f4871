"""bench/predict/profiles.py: the GPU parts, their data-sheet figures, and the achievable shares fitted to them."""

from __future__ import annotations

import pytest

from bench.predict.profiles import FABRICS, GPUS, MATMUL_HALF_WIDTH, NDR_400, SHARES


def test_a_decoders_matmul_share_is_half_its_architectures_at_the_half_width_and_nears_it_as_it_widens() -> None:
    hopper = SHARES["hopper"]
    assert MATMUL_HALF_WIDTH == 2500
    assert hopper.matmul_at(2500) == pytest.approx(0.72 / 2)
    assert hopper.matmul_at(7500) == pytest.approx(0.72 * 3 / 4)
    assert SHARES["ampere"].matmul_at(10**9) == pytest.approx(0.90, rel=1e-5)


def test_each_part_has_its_architectures_shares_and_the_500w_h100_sits_between_the_sxm_and_nvl_sheets() -> None:
    assert {gpu.architecture for gpu in GPUS.values()} <= set(SHARES)
    h500 = GPUS["h100-96gb-500w"]
    assert h500.peak_flops["bf16"] == pytest.approx((989.5e12 + 835.5e12) / 2)
    assert h500.peak_flops["tf32"] == pytest.approx((494.5e12 + 417.5e12) / 2)
    assert GPUS["h200"].peak_flops == GPUS["h100-sxm-80gb"].peak_flops  # the same Hopper SXM compute
    assert GPUS["h200"].hbm_bytes_per_s == 4.8e12 and GPUS["a100-sxm-40gb"].hbm_bytes_per_s == 1.555e12
    assert FABRICS["none"] is None and FABRICS["unstated"] is NDR_400
