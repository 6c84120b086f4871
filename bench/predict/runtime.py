"""What the distributed runtimes cost beyond compute and the bytes they move, measured on a reference model.

Hooks, bucketing, DTensor dispatch, a pipeline schedule's bookkeeping per action: none of it is in a
block's compute or a collective's curve, and on small models it is most of a step (a 2-rank pp step of
the tiny mlp idles most of its time between actions). So calibration runs the suite's own ``single``,
``ddp``, ``zero1``, ``fsdp``, ``tp`` and ``pp`` on the tiny mlp (a few microseconds of compute per
block), and keeps what each costs beyond ``single`` (zero1: beyond ddp) and beyond the collectives the
cost models already count, in the unit it grows with: per step (ddp, zero1), per block (fsdp), per
parallelized layer (tp), per schedule action (pp). Each device count is measured on that many processes:
on shared cores 4 ranks wait for each other far longer than 2 do.
"""

from __future__ import annotations

import dataclasses

from bench.config import RunConfig, resolve
from bench.predict.calibration import Curve, RuntimeOverheads

MICROBATCHES = 4
REFERENCE_STEPS = 24
"""Timed steps per reference run. Their steps take milliseconds, and the median of 8 left zero1's residual
on 2 processes anywhere from 2.1 to 7.5 ms over six calibrations of the 2-core VM (4.8 and 4.8 in two
with 24)."""


def reference_configs(out: str, accelerator: str, ranks: int) -> dict[str, RunConfig]:
    """The reference runs on ``ranks`` ranks: each strategy on the tiny mlp, fp32, the default options."""
    base = RunConfig(out=out, accelerator=accelerator, optimizer="sgd", precision="fp32", model="mlp", preset="tiny",
                     batch_size=8, steps=REFERENCE_STEPS, warmup=2, norm="group")
    return {
        "single": resolve(dataclasses.replace(base, strategy="single")),
        "ddp": resolve(dataclasses.replace(base, strategy="ddp", devices=ranks)),
        "zero1": resolve(dataclasses.replace(base, strategy="zero1", devices=ranks)),
        "fsdp": resolve(dataclasses.replace(base, strategy="fsdp", devices=ranks)),
        "tp": resolve(dataclasses.replace(base, strategy="tp", devices=ranks)),
        "pp": resolve(dataclasses.replace(base, strategy="pp", devices=ranks, microbatches=MICROBATCHES)),
    }


def overheads(step_ms: dict[str, float], curves: dict[str, Curve], ranks: int, blocks: int, pairs: int,
              layers: int, parameter_bytes: list[int], activation_bytes: float,
              tensor_bytes: list[int] | None = None) -> RuntimeOverheads:
    """The residuals of the reference runs' median step times (``step_ms``), each less ``single``'s and
    less the communication the cost models count for it on these tiny messages (``curves`` measured on
    the same ``ranks``): zero1's broadcasts one per parameter tensor (``tensor_bytes``; by default one
    per block)."""
    base = step_ms["single"]
    all_reduce = curves["all_reduce"].at(sum(parameter_bytes))
    gathers = sum(curves["all_gather"].at(b / ranks) + curves["reduce_scatter"].at(b) for b in parameter_bytes)
    tp_comm = 2 * pairs * curves["all_reduce"].at(activation_bytes)
    m, p = MICROBATCHES, ranks
    # A p-rank GPipe step of near-empty stages: 2(m + p - 1) actions on the critical path, 2(p - 1) transfers.
    transfers = 2 * (p - 1) * curves["send_recv"].at(activation_bytes / m)
    return RuntimeOverheads(
        ddp_per_step=max(0.0, step_ms["ddp"] - base - all_reduce),
        zero1_per_step=max(0.0, step_ms["zero1"] - step_ms["ddp"] - sum(
            curves["broadcast"].at(b) for b in (tensor_bytes or parameter_bytes))),
        fsdp_per_block=max(0.0, (step_ms["fsdp"] - base - gathers) / blocks),
        tp_per_layer=max(0.0, (step_ms["tp"] - base - tp_comm) / max(1, layers)),
        pp_per_action=max(0.0, (step_ms["pp"] - transfers) / (2 * (m + p - 1))),
    )


def reference_overheads(step_ms: dict[str, float], curves: dict[str, Curve], ranks: int) -> RuntimeOverheads:
    """``overheads`` with the reference model's own facts (counted on the meta device)."""
    import torch

    import models
    from models.sizes import parameter_counts, tensor_counts

    with torch.device("meta"):
        spec = models.build_model("mlp", "tiny", "group")
    inputs, _ = spec.make_batch(1, torch.Generator().manual_seed(0))
    hidden = spec.blocks[0](inputs.to("meta"))
    styles = spec.tp_plan.styles if spec.tp_plan else {}
    pairs = sum(style == "rowwise" for style in styles.values())
    parameter_bytes = [4 * n for n in parameter_counts(spec.blocks)]
    tensor_bytes = [4 * n for block in tensor_counts(spec.blocks) for n in block]
    batch = 8
    return overheads(step_ms, curves, ranks, len(spec.blocks), pairs, len(styles), parameter_bytes,
                     hidden.numel() * 4 * batch, tensor_bytes)
