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
same stated tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from strategies.precision import Precision
from tests.helpers.equivalence import assert_matches_reference, initial_state, update_error
from tests.helpers.ranks import merged_state, run_ranks_sequence

# Stated tolerances for the lossy precisions, over a few steps at the tiny presets: relative
# difference of each step's loss from the fp32 run's (bf16 keeps 8 mantissa bits, fp16 10).
BF16_RTOL = 5e-2
FP16_RTOL = 1e-2
# A strategy in bf16 against single in bf16: the parameter update after the steps (final - initial) within
# this relative distance of single's (tests/helpers/equivalence.py: update_error). Measured here at the tiny
# presets: mlp mp 0.14% over 3 steps, cnn mp 5.8% over LOSSY_CNN's 2; a run with lr ~ 0 or doubled gradients is
# 100% or more off.
BF16_UPDATE_RTOL = 0.3
# The update of a lossy precision against fp32's (update_error), on the tiny mlp, where training is smooth
# (the tiny cnn's fp32 loss jumps from 2.7 to 4.1 at step 2, so its updates are no yardstick). Measured over
# 4 steps: bf16 0.9%, fp16 0.02% (its scaler skips no step here); a no-op update or a scaler that skips
# every step is 100% off.
BF16_VS_FP32_UPDATE_RTOL = 0.05
FP16_UPDATE_RTOL = 0.01


def trained(config: RunConfig) -> tuple[list[float], dict[str, torch.Tensor]]:
    result = train(resolve(config), capture_state=True)
    return global_losses(result.ranks), result.model_state


def base(tmp_path: Path, **fields: object) -> RunConfig:
    return RunConfig.from_flags(**{"preset": "tiny", "steps": 3, "warmup": 1, "out": str(tmp_path / "r.jsonl"),
                                   **fields})


LOSSY_CNN = {"batch_size": 4, "steps": 2, "warmup": 0}
"""The tiny cnn under bf16 or fp16: this CPU has no fast path for either, so torch's reference convolution
runs them, 8x the fp32 step (3.4 s for the 4 steps of 8 samples). Half the samples and half the steps."""


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


def assert_losses_close(losses: list[float], expected: list[float], rtol: float) -> None:
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=rtol, atol=0.0)


@pytest.mark.parametrize(("strategy", "devices"), [("single", 1), ("mp", 2)])
def test_bf16_stays_within_its_stated_tolerance_of_fp32(strategy: str, devices: int, tmp_path: Path) -> None:
    config = base(tmp_path, model="cnn", norm="group", strategy=strategy, devices=devices, precision="fp32",
                  **LOSSY_CNN)
    fp32_losses, _ = trained(config)
    losses, state = trained(config.with_flags(precision="bf16"))
    assert losses != fp32_losses  # autocast did act
    assert_losses_close(losses, fp32_losses, BF16_RTOL)
    assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())  # fp32 master weights


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


FP32_STEP = Precision.step


def _noop_update(precision: Precision, optimizer: torch.optim.Optimizer) -> None:
    """A broken bf16 update: the step is dropped (fp32, the yardstick, still steps)."""
    if precision.name == "fp32":
        FP32_STEP(precision, optimizer)


def _always_skipping_scaler(precision: Precision, optimizer: torch.optim.Optimizer) -> None:
    """A broken fp16 scaler: every step counted as overflowed, none applied (fp32 still steps)."""
    if precision.name == "fp32":
        FP32_STEP(precision, optimizer)
    else:
        precision.skipped_steps += 1


def _update_error_vs_fp32(config: RunConfig, precision: str) -> tuple[list[float], list[float], float, int]:
    """(fp32 losses, losses, update error against fp32, skipped steps) of ``config`` in ``precision``."""
    config = resolve(config)
    fp32 = train(config, capture_state=True)
    lossy = train(config.with_flags(precision=precision), capture_state=True)
    error = update_error(lossy.model_state, fp32.model_state, initial_state(config))
    return global_losses(fp32.ranks), global_losses(lossy.ranks), error, lossy.ranks[0].skipped_steps


@pytest.mark.parametrize("broken", [None, "no-op update"])
def test_bf16_updates_the_parameters_as_fp32_does_and_a_no_op_update_fails(
    broken: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if broken:
        monkeypatch.setattr(Precision, "step", _noop_update)
    fp32_losses, losses, error, _ = _update_error_vs_fp32(base(tmp_path, model="mlp", batch_size=8), "bf16")
    assert_losses_close(losses, fp32_losses, BF16_RTOL)  # the losses alone pass a no-op update ...
    if broken:
        assert error > BF16_VS_FP32_UPDATE_RTOL  # ... the update does not
    else:
        assert error < BF16_VS_FP32_UPDATE_RTOL


@pytest.mark.parametrize("broken", [None, "always-skipping scaler"])
def test_fp16_updates_the_parameters_as_fp32_does_and_a_scaler_skipping_every_step_fails(
    broken: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if broken:
        monkeypatch.setattr(Precision, "step", _always_skipping_scaler)
    _, _, error, skipped = _update_error_vs_fp32(base(tmp_path, model="mlp", batch_size=8), "fp16")
    if broken:
        assert skipped == 4 and error > FP16_UPDATE_RTOL
    else:
        assert skipped == 0 and error < FP16_UPDATE_RTOL


@pytest.mark.parametrize(("strategy", "devices"), [("single", 1), ("mp", 2)])
def test_fp16_scales_the_loss_records_skipped_steps_and_keeps_fp32_weights(
    strategy: str, devices: int, tmp_path: Path
) -> None:
    # Two steps: fp16 convolutions are slow on the CPU, and the scaler skips the first of them.
    config = resolve(base(tmp_path, model="cnn", norm="group", strategy=strategy, devices=devices, precision="fp32",
                          steps=1, batch_size=LOSSY_CNN["batch_size"]))
    fp32 = train(config)
    result = train(config.with_flags(precision="fp16"), capture_state=True)
    losses = global_losses(result.ranks)
    # The first loss comes before any update: fp16's forward alone, within its tolerance.
    assert_losses_close(losses[:1], global_losses(fp32.ranks)[:1], FP16_RTOL)
    assert all(torch.isfinite(torch.tensor(losses)))
    # The default initial scale, 2**16, overflows these gradients: the scaler skips the step and halves it.
    # ... and only while it finds its scale: a scaler skipping all 4 steps would train nothing.
    assert 1 <= result.ranks[0].skipped_steps < config.run.warmup + config.measure.steps
    assert all(v.dtype == torch.float32 for v in result.model_state.values() if v.is_floating_point())


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
