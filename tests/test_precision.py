"""strategies/precision.py: bf16 and fp16 against fp32, in their losses and their updates, and fp16's loss scaler.

    precision   against fp32                                      why
    bf16        BF16_RTOL on the losses, BF16_VS_FP32_UPDATE_RTOL 8-bit mantissa in the forward's matmuls
                on the update (mlp)
    fp16        FP16_RTOL on the first loss, FP16_UPDATE_RTOL     10-bit mantissa; then the scaler skips
                on the update                                     steps while it finds its scale
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from strategies.precision import Precision
from tests.helpers.equivalence import initial_state, update_error
from tests.helpers.knobs import BF16_RTOL, LOSSY_CNN, assert_losses_close, base, trained

# Stated tolerance of fp16's first loss against the fp32 run's (fp16 keeps 10 mantissa bits; bf16's, BF16_RTOL,
# in tests/helpers/knobs.py, shared with the strategies held to it in tests/test_knobs.py).
FP16_RTOL = 1e-2
# The update of a lossy precision against fp32's (update_error), on the tiny mlp, where training is smooth
# (the tiny cnn's fp32 loss jumps from 2.7 to 4.1 at step 2, so its updates are no yardstick). Measured over
# 4 steps: bf16 0.9%, fp16 0.02% (its scaler skips no step here); a no-op update or a scaler that skips
# every step is 100% off.
BF16_VS_FP32_UPDATE_RTOL = 0.05
FP16_UPDATE_RTOL = 0.01


@pytest.mark.parametrize(("strategy", "devices"), [("single", 1), ("mp", 2)])
def test_bf16_stays_within_its_stated_tolerance_of_fp32(strategy: str, devices: int, tmp_path: Path) -> None:
    config = base(tmp_path, model="cnn", norm="group", strategy=strategy, devices=devices, precision="fp32",
                  **LOSSY_CNN)
    fp32_losses, _ = trained(config)
    losses, state = trained(config.with_flags(precision="bf16"))
    assert losses != fp32_losses  # autocast did act
    assert_losses_close(losses, fp32_losses, BF16_RTOL)
    assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())  # fp32 master weights



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
