"""``hybrid``: an N-D mesh of dp (replicas) x dp_shard (FSDP) x pp x tp, one process per device.

The degrees (``--dp``, ``--dp-shard``, ``--pp``, ``--tp``, product ``--devices``) lay the ranks out
on a DeviceMesh ("dp", "dp_shard", "pp", "tp"), tp innermost (strategies/mesh.py says why), and
strategies/composition.py composes them in torchtitan's order: split, then TP, then FSDP.

    --devices 4 --dp 2 --pp 2       rank = replica * pp + stage rank   (pp innermost)

                   stage rank 0      stage rank 1
    replica 0        rank 0   ---->   rank 1        pp sub-group {0, 1}: activations, gradients
    replica 1        rank 2   ---->   rank 3        pp sub-group {2, 3}
                   dp {0, 2}         dp {1, 3}      after the schedule: all-reduce (average) the
                                                    stage's gradients over its dp sub-group

Pure dp x pp averages each part's plain gradients over its replicas (``ReplicaAverager``,
strategies/ddp.py, rather than DDP around each stage: see there why). With FSDP or TP the
parameters are DTensors and fully_shard's reduce-scatter (and HSDP's all-reduce over dp) does it,
driven by the pipeline stage after the last micro-batch. With ``--pp 1`` there is no pipeline:
the whole model gets TP, then FSDP, as the ``tp`` and ``fsdp`` strategies would compose.

The batch: data-parallel index = replica * dp_shard + shard cuts the global batch into dp x dp_shard
contiguous shards (ddp's rule); a shard's pp and tp ranks all see it.

Equivalence: a data-parallel rank's gradient is the gradient of its shard's mean loss (pp's argument,
see strategies/pipeline.py; TP's sharded layers compute the same sums); the mean over equal shards
is the global batch's mean-loss gradient. Each shard's last stage returns the shard's mean loss
(each of its tp ranks, the same value), and the runner's mean over those is the global mean loss.
tests/test_hybrid.py checks both against ``single``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology, VerifyCheck
from strategies.composition import check_fsdp_schedule, check_mesh, comparison_parts, layout_of, parallelize_part
from strategies.ddp import ReplicaAverager
from strategies.distributed import backend
from strategies.fsdp import full_state
from strategies.hybrid_cost import HybridCost
from strategies.mesh import LAYOUT, MeshLayout
from strategies.options import (
    BucketOptions,
    MeshOptions,
    ModelFacts,
    PipelineOptions,
    RunOptions,
    SplitOptions,
)
from strategies.pipeline import (
    PipelinePart,
    PipelineRankFields,
    build_pipeline,
    check_pipeline,
    pipeline_rank_fields,
    pipeline_record_fields,
    run_schedule,
    scale_gradients,
)
from strategies.shards import shard_range
from strategies.timing import timed_step


@dataclass(frozen=True)
class HybridRankFields:
    """One hybrid rank's figures: its pipeline rank's (None without a pipeline), its replica's reduction."""

    pipeline: PipelineRankFields | None
    replica: int
    grad_reduce_ms: list[float]
    """The reduction's time in each timed step (empty unless pure dp x pp averages replicas)."""
    grad_bytes: int


class HybridStrategy(Strategy):
    """An N-D mesh: --dp replicas x --dp-shard FSDP ranks x a --pp-rank pipeline x --tp tensor-parallel ranks."""

    name = "hybrid"
    splits_the_batch = True
    launch = Launch.PER_DEVICE
    min_devices = 4
    min_mesh_dims = 2  # one dimension alone is ddp, fsdp, pp or tp
    cost_model = HybridCost()
    # The N-D meshes beside dp x pp: each dimension hybrid composes, inside another (tests/test_hybrid.py has
    # the rest, and dp-shard x tp x pp on 8 ranks), on the two families with a tensor-parallel plan (each
    # 4-rank run costs 10-20 s on 2 cores).
    verify_checks = (VerifyCheck(4, {"dp_shard": 2, "tp": 2, "microbatches": 1}, ("mlp", "transformer")),
                     VerifyCheck(4, {"dp_shard": 2, "pp": 2}, ("mlp", "transformer")))
    description = ("N-D DeviceMesh: --dp replicas x --dp-shard FSDP x --pp pipeline x --tp tensor parallel "
                   "(default dp x pp, pp 2)")
    reads: ClassVar[tuple[type, ...]] = (SplitOptions, PipelineOptions, MeshOptions, BucketOptions)
    memory_tracking_refusal = (
        "torch's MemTracker cannot follow torch.distributed.pipelining's backward (autograd.grad on stage inputs)"
    )
    fp16_refusal = (
        "needs one gradient scaler over the whole model, and hybrid keeps its stages in separate processes "
        "(each would skip steps on its own overflows); use bf16 (no loss scaling needed)"
    )

    def __init__(
        self, run: RunOptions, *, split: SplitOptions, pipeline: PipelineOptions, mesh: MeshOptions,
        buckets: BucketOptions,
    ) -> None:
        super().__init__(run)
        self.split = split
        self.pipeline = pipeline
        self.mesh = mesh
        self.buckets = buckets

    @property
    def layout(self) -> MeshLayout:
        return layout_of(self.run, self.mesh)

    def memory_refusal(self) -> str | None:
        """None where there is no pipeline (torch's FSDP-aware tracker follows fully_shard), else the refusal."""
        return None if self.layout.pp == 1 else self.memory_tracking_refusal

    def validate(self, facts: ModelFacts) -> None:
        layout = self.layout
        check_mesh(self.run, self.split, layout, facts)
        if layout.pp > 1:
            check_pipeline(self.run, self.split, self.pipeline, facts, layout.pp,
                           self.run.global_batch // layout.data_parallel)
            check_fsdp_schedule(self.pipeline, layout)

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        layout = self.layout
        device = topo.devices[0]
        mesh = layout.build(device.type, topo.rank)
        plan = spec.tp_plan

        def parallelize(root: nn.Module, blocks: nn.Sequential, first_block: int) -> None:
            parallelize_part(root, blocks, first_block, mesh, layout, plan)

        if layout.pp == 1:
            blocks = spec.blocks.to(device)
            parallelize(blocks, blocks, 0)
            return blocks
        # Split first; each stage is sharded (TP, FSDP) before it becomes a PipelineStage.
        part = build_pipeline(self.run, self.split, self.pipeline, spec, layout.coords(topo.rank).stage, layout.pp,
                              device, self.run.global_batch // layout.data_parallel, group=mesh.get_group("pp"),
                              parallelize=parallelize)
        if layout.averages_replicas:
            part.averager = ReplicaAverager(part, mesh.get_group("dp"), self.buckets.bucket_cap_mb)
        return part

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Every pp and tp rank of a data-parallel index takes its shard: a pipeline's first stage reads
        # the inputs, its last the targets.
        layout = self.layout
        start, stop = shard_range(len(inputs), layout.data_index(topo.rank), layout.data_parallel)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        if not isinstance(model, PipelinePart):  # --pp 1: TP and FSDP reduce inside the backward
            return super().train_step(model, inputs, targets, loss_fn, optimizer)
        timing = model.log.timing
        with timed_step(model.timer, model.log, [model.device]) as clock:
            optimizer.zero_grad(set_to_none=True)
            loss = run_schedule(model, inputs, targets)
            with clock.update():
                scale_gradients(model, self.split.microbatches)
            if model.averager is not None:
                # The bubble figures are pp's own: of the pipeline's time, the reduction left out.
                clock.excluded_ms = model.averager.reduce([model.device])
            with clock.update():
                self.precision.step(optimizer)
        if timing and model.averager is not None:
            model.averager.reduce_ms.append(clock.excluded_ms)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.global_state() if isinstance(model, PipelinePart) else full_state(model)

    def rank_fields(self, model: nn.Module, topo: Topology) -> HybridRankFields:
        replica = self.layout.coords(topo.rank).replica
        if not isinstance(model, PipelinePart):
            return HybridRankFields(None, replica, [], 0)
        averager = model.averager
        pipeline = pipeline_rank_fields(model, topo.rank)
        if averager is None:
            return HybridRankFields(pipeline, replica, [], 0)
        return HybridRankFields(pipeline, replica, averager.reduce_ms, averager.grad_bytes)

    def record_fields(self, model: nn.Module, per_rank: Sequence[HybridRankFields]) -> dict[str, Any]:
        """The mesh; with a pipeline, pp's figures combined over every rank (step time: the slowest
        rank's; stage busy times: medians over replicas; bubbles: one per rank); with pure dp x pp,
        the reduction's."""
        layout = self.layout
        batch = self.run.global_batch // layout.data_parallel
        fields: dict[str, Any] = {
            "dp": layout.dp,
            "dp_shard": layout.dp_shard,
            "pp": layout.pp,
            "tp": layout.tp,
            "rank_layout": LAYOUT,
            "mesh_dims": list(layout.grid_dims),
            "mesh": layout.ranks(),
            "fsdp_dims": list(layout.fsdp_dims),
            "per_replica_batch_size": batch,
            "backend": backend(),
            "parts": comparison_parts(self.run, self.split, self.pipeline, layout),
        }
        if isinstance(model, PipelinePart):
            pipelines = [r.pipeline for r in per_rank if r.pipeline is not None]
            fields |= {"microbatch_size": batch // self.split.microbatches,
                       **pipeline_record_fields(self.split, self.pipeline, model.balance, pipelines, layout.pp)}
        if isinstance(model, PipelinePart) and model.averager is not None:
            slowest = [max(step) for step in zip(*(r.grad_reduce_ms for r in per_rank), strict=True)]
            fields |= {
                "grad_reduce_ms": statistics.median(slowest),
                "grad_reduce_ms_per_rank": [statistics.median(r.grad_reduce_ms) for r in per_rank],
                "grad_reduce_bytes_per_rank": [r.grad_bytes for r in per_rank],
                "buckets": len(model.averager.buckets),
            }
        return fields
