"""Training knobs: exact where they change no arithmetic, within a stated tolerance where they do.

    knob                        against the same run without it     why
    --activation-checkpointing  bit-identical (single)              the recomputed forward is the same forward
    --channels-last             fp32 tolerance (RTOL, ATOL)         NHWC convolutions sum in another order
    --compile                   fp32 tolerance                      inductor fuses and reorders the arithmetic
    --precision bf16            BF16_RTOL on the losses, and        8-bit mantissa in the forward's matmuls
                                the update against fp32's (mlp),
                                strategies' against single in bf16
    --precision fp16            FP16_RTOL on the first loss         10-bit mantissa; then the scaler skips
                                and FP16_UPDATE_RTOL on the update  steps while it finds its scale

Strategies under the lossy precisions are held to ``single`` at the same precision, within the
same stated tolerances. The precisions against fp32 themselves (bf16's and fp16's losses and updates,
fp16's scaler) are tested in tests/test_precision.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.harness.config import resolve
from bench.harness.runner import global_losses
from tests.helpers.equivalence import assert_matches_reference, initial_state, update_error
from tests.helpers.knobs import BF16_RTOL, LOSSY_CNN, assert_losses_close, base, trained
from tests.helpers.ranks import merged_state, run_ranks_sequence

# A strategy in bf16 against single in bf16: the parameter update after the steps (final - initial) within
# this relative distance of single's (tests/helpers/equivalence.py: update_error). Measured here at the tiny
# presets: mlp mp 0.14% over 3 steps, cnn mp 5.8% over LOSSY_CNN's 2; a run with lr ~ 0 or doubled gradients is
# 100% or more off.
BF16_UPDATE_RTOL = 0.3


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_activation_checkpointing_changes_no_bit(model: str, tmp_path: Path) -> None:
    # Group norm: BatchNorm would update its running statistics again in the recomputed forward.
    config = base(tmp_path, model=model, norm="group")
    plain_losses, plain_state = trained(config)
    losses, state = trained(config.with_flags(activation_checkpointing=True))
    assert losses == plain_losses
    assert state.keys() == plain_state.keys()  # the wrapper's prefix never reaches a checkpoint
    assert all(torch.equal(state[k], plain_state[k]) for k in state)


def test_channels_last_trains_like_contiguous_within_fp32_tolerance(tmp_path: Path) -> None:
    config = base(tmp_path, model="cnn", norm="group", channels_last=False)
    expected = trained(config)
    assert_matches_reference(*trained(config.with_flags(channels_last=True)), expected)


@pytest.mark.launches  # torch.compile may start a Python process to check a cached kernel loads (inductor)
def test_compiled_and_checkpointed_mp_stages_train_like_one_plain_device(tmp_path: Path) -> None:
    config = base(tmp_path, model="mlp")
    expected = trained(config)
    knobs = config.with_flags(strategy="mp", devices=2, microbatches=2, compile=True,
                              activation_checkpointing=True)
    assert_matches_reference(*trained(knobs), expected)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_mp_in_bf16_updates_the_parameters_as_single_in_bf16_does(model: str, tmp_path: Path) -> None:
    config = base(tmp_path, model=model, norm="group", precision="bf16", **(LOSSY_CNN if model == "cnn" else
                                                                           {"batch_size": 8}))
    expected_losses, expected = trained(config)
    losses, state = trained(config.with_flags(strategy="mp", devices=2, microbatches=2))
    assert_losses_close(losses, expected_losses, BF16_RTOL)
    assert update_error(state, expected, initial_state(resolve(config))) < BF16_UPDATE_RTOL


@pytest.mark.parametrize(("broken", "changes"), [("lr ~ 0", {"lr": 1e-9}), ("doubled gradients", {"lr": 0.02})])
def test_the_bf16_check_fails_a_run_with_lr_near_zero_or_doubled_gradients(
    broken: str, changes: dict, tmp_path: Path
) -> None:
    # SGD with momentum: doubling every gradient doubles every update, exactly as doubling lr (0.01) does.
    config = base(tmp_path, model="mlp", precision="bf16", batch_size=8)
    expected_losses, expected = trained(config)
    losses, state = trained(config.with_flags(**changes))
    assert_losses_close(losses, expected_losses, BF16_RTOL)  # the losses alone do not see it ...
    assert update_error(state, expected, initial_state(resolve(config))) > BF16_UPDATE_RTOL, broken  # the update does


@pytest.mark.distributed
def test_per_device_strategies_in_bf16_match_single_in_bf16_and_checkpointed_pp_stages_match_exactly(
    tmp_path: Path,
) -> None:
    config = base(tmp_path, model="mlp", precision="bf16", batch_size=8)
    expected_losses, expected = trained(config)
    fp32 = config.with_flags(precision="fp32")
    fp32_expected = trained(fp32)
    ddp = resolve(config.with_flags(strategy="ddp", devices=2))
    pp = resolve(config.with_flags(strategy="pp", devices=2, microbatches=2))
    checkpointed = resolve(fp32.with_flags(strategy="pp", devices=2, microbatches=2,
                                           activation_checkpointing=True))
    # fsdp in bf16 is autocast like every other strategy (fp32 parameters and reduction): held to the same check.
    sharded = [resolve(config.with_flags(strategy=name, devices=2)) for name in ("zero1", "fsdp", "tp")]
    *bf16_runs, checkpointed_run = run_ranks_sequence([ddp, pp, *sharded, checkpointed], 2, tmp_path)
    assert bf16_runs[3][0].strategy_fields["mixed_precision"]["autocast_dtype"] == "bfloat16"
    initial = initial_state(resolve(config))
    for results in bf16_runs:
        assert_losses_close(global_losses(results[0].ranks), expected_losses, BF16_RTOL)
        assert update_error(merged_state(results), expected, initial) < BF16_UPDATE_RTOL
    assert_matches_reference(global_losses(checkpointed_run[0].ranks), merged_state(checkpointed_run), fp32_expected)


def test_peak_tflops_gives_an_mfu_on_the_cpu_and_no_peak_gives_none(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    for extra in ([], ["--peak-tflops", "0.5"]):
        assert main(["run", "--model", "mlp", "--preset", "tiny", "--steps", "2", "--out", str(out), *extra]) == 0
    without, with_peak = (json.loads(line) for line in out.read_text().splitlines())
    assert without["mfu"] is None and without["peak_flops_source"] is None
    assert without["precision"] == "fp32" and without["config"]["channels_last"] is False  # CPU defaults
    assert with_peak["peak_flops_source"] == "--peak-tflops"
    assert with_peak["mfu"] == pytest.approx(with_peak["achieved_flops_per_s"] / 0.5e12)
