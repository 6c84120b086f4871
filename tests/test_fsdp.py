"""fsdp's bf16 is the others' bf16: autocast over fp32 parameters, held to ddp's arithmetic (strategies/fsdp.py).

ddp and fsdp split the batch alike, so in the same precision each rank computes the same forward on the
same shard; on 2 gloo ranks their mean gradients are the same sums, and they train to the same bits.
FSDP2's MixedPrecisionPolicy (bf16 parameters) did not: the transformer's LayerNorm parameters ended
2% apart, and the cnn's BatchNorm in bf16 raised "expected scalar type BFloat16 but found Float".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses
from tests.helpers.ranks import merged_state, run_ranks_sequence

# The two strategies agree to the bit here; the tolerance leaves room for another reduction order,
# three orders of magnitude below what bf16 parameters made of it.
RTOL = 1e-5


def _parameters(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # BatchNorm's running statistics are each rank's own under fsdp (ddp broadcasts rank 0's): not arithmetic.
    return {k: v for k, v in state.items() if v.is_floating_point() and "running_" not in k}


@pytest.mark.distributed
def test_fsdp_in_bf16_trains_like_ddp_in_bf16(tmp_path: Path) -> None:
    configs = []
    for model in ("cnn", "transformer"):
        # 4 samples: the cnn's bf16 convolutions' backward on a CPU without bf16 kernels took 4 s a run at 8
        base = RunConfig.from_flags(model=model, preset="tiny", norm="batch", steps=3, warmup=1, precision="bf16",
                                    batch_size=4, devices=2, out=str(tmp_path / "r.jsonl"))
        configs += [resolve(dataclasses.replace(base, strategy=name)) for name in ("ddp", "fsdp")]
    runs = run_ranks_sequence(configs, 2, tmp_path)
    for model, ddp, fsdp in zip(("cnn", "transformer"), runs[::2], runs[1::2], strict=True):
        torch.testing.assert_close(global_losses(fsdp[0].ranks), global_losses(ddp[0].ranks), rtol=RTOL, atol=0)
        want, got = _parameters(merged_state(ddp)), _parameters(merged_state(fsdp))
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key].dtype == torch.float32, key
            torch.testing.assert_close(got[key], value, rtol=RTOL, atol=RTOL * value.abs().max().item(),
                                       msg=f"{model} {key}")
    assert runs[1][0].strategy_fields["mixed_precision"] == {"param_dtype": "float32", "reduce_dtype": "float32",
                                                             "autocast_dtype": "bfloat16"}


@pytest.mark.parametrize(("reshard_after_forward", "gathers"), [(True, 2 * 4), (False, 4)])
def test_zero3_gathers_every_block_again_for_its_backward_and_zero2_none(reshard_after_forward: bool,
                                                                         gathers: int) -> None:
    # What FSDP2 sends as the suite wraps it (each block its own module, none the root): tests/test_comm.py
    # counts ZeRO-3's bytes on real ranks, the forward's gathers and as many again in the backward.
    from bench.predict.costs import predict_step
    from bench.predict.curves import Curve
    from bench.predict.scenario import Scenario
    from tests.helpers.calibrations import FREE, equal_blocks

    one_ms_gathers = {**FREE, "all_gather": Curve([(1, 1.0), (2**30, 1.0)])}
    calibration = equal_blocks(4, forward=0.0, backward=0.0, curves=one_ms_gathers, overlap=0.0)
    step = predict_step(calibration, Scenario("fsdp", 2, 8, reshard_after_forward=reshard_after_forward), 1)
    assert step.exposed_comm_ms == pytest.approx(gathers * 1.0) == pytest.approx(step.step_ms)
