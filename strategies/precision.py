"""Numeric precision of a training step: autocast for bf16/fp16, a gradient scaler for fp16, TF32 switches.

    precision   matmuls and convolutions         parameters, gradients, optimizer   loss scaling
    fp32        fp32 (TF32 off on CUDA)           fp32                               none
    tf32        TF32 tensor cores (CUDA only)     fp32                               none
    bf16        bf16 under torch.autocast         fp32                               none (bf16 keeps fp32's range)
    fp16        fp16 under torch.autocast         fp32                               torch.amp.GradScaler

Only the forward runs under autocast; the loss is taken in fp32 and the backward outside the
context, as the AMP recipe asks ("backward passes under autocast are not recommended").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from strategies.errors import ConfigError

PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def default_precision(accelerator: str) -> str:
    """``--precision auto``: bf16 on GPUs (current practice: fp32's range, tensor-core speed), fp32 on CPUs."""
    return "bf16" if accelerator == "cuda" else "fp32"


def check_precision(precision: str, accelerator: str) -> None:
    """Raises ConfigError for a precision this run cannot use, before any process starts."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if precision == "tf32" and accelerator != "cuda":
        raise ConfigError(f"--precision tf32 is a CUDA tensor-core mode; on {accelerator} choose fp32, bf16 or fp16")


def set_tf32(precision: str) -> None:
    """TF32 tensor cores for fp32 matmuls and convolutions only when asked for: fp32 means fp32,
    and the MFU peak for fp32 assumes no TF32."""
    allowed = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = allowed


@dataclass
class Precision:
    """How one strategy's training step runs its arithmetic (see the module's table)."""

    name: str
    """fp32, tf32, bf16 or fp16 (already resolved from auto)."""
    device_type: str
    """cuda or cpu: where autocast and the scaler act."""
    skipped_steps: int = field(default=0, init=False)
    """fp16: optimizer steps the scaler skipped because gradients overflowed (the first few, while
    it lowers its initial 2**16 scale), so the run trained on fewer steps than it timed."""
    _scaler: torch.amp.GradScaler | None = field(default=None, init=False, repr=False)

    @property
    def autocasts(self) -> bool:
        return self.name in AUTOCAST_DTYPES

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the forward runs in (nothing for fp32 and tf32)."""
        if not self.autocasts:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=AUTOCAST_DTYPES[self.name])

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """fp16's loss scaler, made on first use (None otherwise)."""
        if self.name == "fp16" and self._scaler is None:
            self._scaler = torch.amp.GradScaler(self.device_type)
        return self._scaler

    def forward(self, module: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
        """``module(*inputs)`` under autocast, returned in fp32 so the loss is taken in fp32."""
        with self.autocast():
            out = module(*inputs)
        return out.float() if self.autocasts else out

    def backward(self, loss: torch.Tensor) -> None:
        scaler = self.scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step: through the scaler for fp16 (it skips a step whose gradients overflowed)."""
        scaler = self.scaler
        if scaler is None:
            optimizer.step()
            return
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        if scaler.get_scale() < scale:  # the scale drops exactly when the step was skipped
            self.skipped_steps += 1

    def wrap_forward(self, module: nn.Module) -> None:
        """Makes ``module``'s own forward run under autocast, returning fp32, without changing its
        parameter names: for pipeline stages, whose forward the schedule calls."""
        if not self.autocasts:
            return
        inner = module.forward

        @functools.wraps(inner)
        def forward(*args: Any, **kwargs: Any) -> torch.Tensor:
            with self.autocast():
                out = inner(*args, **kwargs)
            return out.float()

        setattr(module, "forward", forward)  # noqa: B010 (an instance attribute shadows the method)


class AutocastModule(nn.Module):
    """Runs ``module`` under autocast inside its own forward.

    nn.DataParallel needs this form: its replica threads turn autocast on, but with the default
    dtype (fp16 on CUDA), not this thread's, so bf16 must be set inside the replicated module.
    """

    def __init__(self, module: nn.Module, precision: Precision) -> None:
        super().__init__()
        self.module = module
        self.precision = precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.precision.forward(self.module, x)
