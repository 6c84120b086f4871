"""How ``hybrid`` composes its dimensions on one mesh, in torchtitan's order, and checks them first.

    1. split    (pp > 1)  each rank cuts its stage's blocks (strategies/pipeline.py)
    2. TP       (tp > 1)  inside each block, over mesh["tp"]: Megatron-LM's column/row pairs
    3. FSDP               each block, then the stage's (or the model's) root, over mesh["dp_shard"],
                          or HSDP over mesh["dp", "dp_shard"] (replicate over dp, shard over dp_shard)
    4. stage  (pp > 1)    the sharded module becomes a PipelineStage, whose backward drives FSDP's
                          gradient sync (only after the last micro-batch)

TP before FSDP because fully_shard shards what it is given: TP's DTensors get a second, FSDP, dim
(2-D parameters, as torchtitan's ``apply_fsdp`` after ``apply_tp``). Pure dp x pp (no FSDP, no TP)
keeps plain gradients and averages them with ``ReplicaAverager`` after the schedule instead.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from models.spec import TensorParallelPlan
from strategies.errors import ConfigError
from strategies.fsdp import shard_blocks
from strategies.mesh import MeshLayout
from strategies.options import MeshOptions, ModelFacts, PipelineOptions, RunOptions, SplitOptions
from strategies.schedules import available_schedules, schedule_info
from strategies.shards import check_divisible
from strategies.tensor_parallel import parallelize_blocks, plan_refusal


def parallelize_part(
    root: nn.Module, blocks: nn.Sequential, first_block: int, mesh: DeviceMesh, layout: MeshLayout,
    plan: TensorParallelPlan | None,
) -> None:
    """TP, then FSDP, on ``blocks`` (a stage's, starting at whole-model block ``first_block``, or the whole
    model's), in place; ``root`` is the module run on them (the stage's wrapper, or ``blocks`` itself)."""
    if layout.tp > 1:
        if plan is None:  # validate refused it before any process started; a user's own torchrun did not
            raise ConfigError(plan_refusal(None, (), "--tp") or "")
        parallelize_blocks(blocks, plan.local_styles(first_block, len(blocks)), mesh["tp"])
    if layout.fsdp_dims:
        shard_blocks(blocks, root, mesh[layout.fsdp_dims])


def layout_of(run: RunOptions, mesh: MeshOptions) -> MeshLayout:
    """The run's degrees, raising ConfigError with the arithmetic when they do not multiply to --devices."""
    try:
        return MeshLayout.for_devices(run.devices, mesh.dp, mesh.pp, mesh.dp_shard, mesh.tp)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_mesh(run: RunOptions, split: SplitOptions, layout: MeshLayout, facts: ModelFacts) -> None:
    """The checks of the degrees themselves, as one-line ConfigErrors: tensor parallelism needs a plan
    whose dimensions --tp divides; the batch splits evenly over the data-parallel ranks and micro-batches."""
    if layout.tp > 1:
        if (refusal := plan_refusal(facts.tp_plan, facts.layer_types, f"--tp {layout.tp}")) is not None:
            raise ConfigError(refusal)
        assert facts.tp_plan is not None
        try:
            facts.tp_plan.check_degree(layout.tp)
        except ValueError as exc:
            raise ConfigError(f"{exc} (--tp {layout.tp})") from None
    if layout.pp == 1 and split.microbatches > 1:
        raise ConfigError(f"--microbatches {split.microbatches} splits a pipeline's batch, and --pp 1 has no "
                          "pipeline; leave --microbatches at 1")
    factors = [f"{layout.dp} data-parallel replicas"] if layout.dp_shard == 1 else (
        [f"{layout.dp} replicas"] * (layout.dp > 1) + [f"{layout.dp_shard} FSDP shards"])
    what = f"({' x '.join([*factors, f'{split.microbatches} micro-batches'])})"
    try:
        check_divisible(run.global_batch, layout.data_parallel * split.microbatches, what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_fsdp_schedule(pipeline: PipelineOptions, layout: MeshLayout) -> None:
    """Refuses a schedule that splits the backward (zero-bubble) where FSDP shards the stages: torch's stage
    reduces FSDP's gradients after the last micro-batch, and with the weight gradients computed apart
    (autograd.grad) they came out wrong here (torch 2.14.1, gloo: parameters 5e-3 to 1.5e-2 off ``single``)."""
    info = schedule_info(pipeline.schedule, available_schedules())
    if layout.pp > 1 and layout.fsdp_dims and info.splits_backward:
        dims = " x ".join(layout.fsdp_dims).replace("_", "-")
        raise ConfigError(f"schedule {info.name!r} splits each backward into input and weight halves, which FSDP's "
                          f"gradient reduction (over {dims}) does not follow here; use gpipe, 1f1b, interleaved-1f1b "
                          "or looped-bfs with --dp-shard (or with --dp beside --tp)")


def comparison_parts(
    run: RunOptions, split: SplitOptions, pipeline: PipelineOptions, layout: MeshLayout
) -> dict[str, dict[str, Any]]:
    """The runs whose efficiencies the hybrid's is held against (reports/tables.py reads these), each
    at the hybrid's per-device batch: ddp on D devices, and pp on P devices (one replica's pipeline,
    fed one replica's batch) with the same schedule and micro-batches. Only for pure dp x pp: the
    table multiplies exactly those two efficiencies; other meshes get none (the table shows NaN)."""
    if not layout.averages_replicas:
        return {}
    per_device = run.global_batch // layout.devices
    return {
        "ddp": {"strategy": "ddp", "devices": layout.dp, "batch_size": per_device * layout.dp},
        "pp": {"strategy": "pp", "devices": layout.pp, "batch_size": per_device * layout.pp,
               "microbatches": split.microbatches, "schedule": pipeline.schedule,
               "stages_per_rank": pipeline.stages_per_rank},
    }
