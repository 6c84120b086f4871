"""A block's backward as zero-bubble pipeline schedules split it: the input's gradient (I), then the weights' (W)."""

from __future__ import annotations

import logging
import statistics

import torch

from models.spec import ModelSpec
from strategies.devices import synchronized_clock

log = logging.getLogger(__name__)


def takes_gradient(block: int, x: torch.Tensor) -> bool:
    """Whether block ``block``'s backward computes its input's gradient, as in a run: every block's but the first's,
    whose input is the batch (calibrated with one, the small cnn's first pipeline stage ran its backwards 0.4-0.8 ms
    quicker than its blocks timed, the image's gradient 0.74 ms of its first block's 0.77 at 4 samples)."""
    return block > 0 and x.is_floating_point()


def split_backward_ms(spec: ModelSpec, batch: int, device: torch.device,
                      repeats: int) -> list[tuple[float, float]] | None:
    """Per block, (input-gradient ms, weight-gradient ms) at ``batch`` samples, as zero-bubble schedules split
    the backward: whole passes as ``block_times_ms`` times them, each block's backward run by the functions
    torch.distributed.pipelining's stages call for I and W (``stage_backward_input``, then
    ``stage_backward_weight``). None where this torch has no such functions (the split is then guessed, and
    predictions say so). A block whose input takes no gradient (token ids, the batch itself) has no I."""
    try:
        from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
    except ImportError:
        return None
    now = synchronized_clock(device)
    blocks = spec.blocks.to(device)
    inputs, targets = spec.make_batch(batch, torch.Generator().manual_seed(0))
    inputs, targets = inputs.to(device), targets.to(device)
    input_ms: list[list[float]] = [[] for _ in blocks]
    weight_ms: list[list[float]] = [[] for _ in blocks]
    for r in range(repeats + 1):
        block_inputs, outputs, x = [], [], inputs
        for i, block in enumerate(blocks):
            x = x.detach().requires_grad_(takes_gradient(i, x))
            out = block(x)
            if i == len(blocks) - 1:
                out = spec.loss_fn(out, targets)
            block_inputs.append(x)
            outputs.append(out)
            x = out
        gradient = None
        for i in reversed(range(len(blocks))):
            start = now()
            try:  # a private API whose return type moved between torch releases
                result = stage_backward_input([outputs[i]], None if gradient is None else [gradient],
                                              [block_inputs[i]], blocks[i].parameters())
                grads, groups = (result if isinstance(result, tuple)
                                 else (result.input_grads, result.param_groups))
                middle = now()
                stage_backward_weight(blocks[i].parameters(), groups)
            except (TypeError, ValueError, AttributeError, RuntimeError) as exc:
                log.warning("the backward's I/W split is not measured on this torch: %s", exc)
                return None
            end = now()
            if r > 0:  # the first pass runs cold
                input_ms[i].append((middle - start) * 1e3)
                weight_ms[i].append((end - middle) * 1e3)
            gradient = grads[0]
    blocks.zero_grad(set_to_none=True)
    return [(statistics.median(a), statistics.median(w)) for a, w in zip(input_ms, weight_ms, strict=True)]
