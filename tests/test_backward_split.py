"""bench/predict/backward_split.py: each block's backward split into its input's gradient (I) and its weights' (W)."""

from __future__ import annotations

import pytest

import models


def test_calibration_splits_each_blocks_backward_into_its_input_and_weight_gradients() -> None:
    import torch

    from bench.predict.backward_split import split_backward_ms
    from bench.predict.compute import block_times_ms

    spec = models.build_model("mlp", "tiny", "group")
    torch.manual_seed(0)
    whole = block_times_ms(spec, 64, torch.device("cpu"), 3)
    split = split_backward_ms(spec, 64, torch.device("cpu"), 3)
    if split is None:
        pytest.skip("this torch's pipelining offers no I/W split the calibration can call")
    assert len(split) == len(whole) and all(i >= 0 and w > 0 for i, w in split)
    first_input = spec.make_batch(2, torch.Generator().manual_seed(0))[0]
    if not first_input.is_floating_point():  # token ids take no gradient: the first block has no I
        assert split[0][0] < 0.05
