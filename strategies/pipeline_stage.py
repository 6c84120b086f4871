"""Adapters between our stages and torch's ``PipelineStage``: timing its compute, contiguous tensors.

``TimedStage`` overrides three methods of ``PipelineStage`` that torch documents nowhere
(``forward_one_chunk``, ``backward_one_chunk``, ``backward_weight_one_chunk``), on a project that
runs torch 2.11 to 2.14. It is the only way to time compute apart from transfers, so it is kept
here, small, with a test that the three methods and the ``full_backward`` argument still exist
(tests/test_pipeline_stage.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from strategies.timing import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, StepTimer

TIMED_METHODS = ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk")


@functools.cache
def timed_stage_class() -> type:
    """A PipelineStage that times each compute call it is asked for.

    Why here and not with module hooks: every compute action of every schedule goes through these
    three methods (F, B; and I then W for zero-bubble schedules, which split the backward with
    their own graph walk that a custom autograd Function inside the stage would break), and
    nothing else does: the point-to-point transfers happen in the schedule, between the calls.
    """
    from torch.distributed.pipelining import PipelineStage

    class TimedStage(PipelineStage):
        timer: StepTimer

        def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            with self.timer.span(self.stage_index, fwd_chunk_id, FORWARD, self.device):
                return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

        def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            full = kwargs.get("full_backward", args[1] if len(args) > 1 else True)
            with self.timer.span(self.stage_index, bwd_chunk_id, BACKWARD if full else BACKWARD_INPUT, self.device):
                return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)

        def backward_weight_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            with self.timer.span(self.stage_index, bwd_chunk_id, BACKWARD_WEIGHT, self.device):
                return super().backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs)

    return TimedStage


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class Contiguous(nn.Module):
    """Runs ``module`` with a contiguous output and a contiguous input gradient.

    The receiving rank allocates its buffer with the strides the sender's tensor had, and gloo
    refuses strided buffers: an LSTM's batch-first output, and the gradient of its input, are views.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            x = _ContiguousGrad.apply(x)
        return self.module(x).contiguous()
