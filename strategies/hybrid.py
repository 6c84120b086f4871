"""``hybrid``: data parallel x pipeline parallel on a 2-D DeviceMesh ("dp", "pp"), one process per device.

D replicas of a P-rank pipeline. Each replica runs pp's schedule on its contiguous 1/D of the
global batch (ddp's batch rule); then each stage averages its gradients with the same stage of
the other replicas, and every rank takes the same optimizer step:

    --devices 4 --dp 2 --pp 2       rank = replica * pp + stage rank   (pp innermost)

                   stage rank 0      stage rank 1
    replica 0        rank 0   ---->   rank 1        pp sub-group {0, 1}: activations, gradients
    replica 1        rank 2   ---->   rank 3        pp sub-group {2, 3}
                   dp {0, 2}         dp {1, 3}      after the schedule: all-reduce (average) the
                                                    stage's gradients over its dp sub-group

Why pp innermost: one pipeline then holds consecutive ranks, which torchrun puts on one node, so
the pipeline's transfers (two per micro-batch at every stage boundary, each on the critical path)
use the node's fast links, while the one all-reduce per step crosses nodes. torchtitan orders
its mesh the other way (pp outermost) because beside FSDP and TP the data-parallel traffic
dominates; here each rank reduces only its 1/P of the model, once a step.

Composition, as torchtitan applies it: split first (each rank builds its replica's pipeline
part), then average each part's gradients over its replicas (``ReplicaAverager``, strategies/ddp.py,
rather than DDP around each stage: see there why).

Equivalence: a replica's gradient is the gradient of its shard's mean loss (pp's argument, see
strategies/pipeline.py); the mean over D equal shards is the global batch's mean-loss gradient.
Each replica's last stage returns its shard's mean loss, and the runner's mean over those is the
global mean loss. tests/test_hybrid.py checks both against ``single``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.ddp import ReplicaAverager
from strategies.errors import ConfigError
from strategies.mesh import LAYOUT, MeshLayout
from strategies.options import BucketOptions, MeshOptions, ModelFacts, PipelineOptions, RunOptions, SplitOptions
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
from strategies.shards import check_divisible, shard_range
from strategies.timing import timed_step


@dataclass(frozen=True)
class HybridRankFields:
    """One hybrid rank's figures: its pipeline rank's, and its share of the reduction."""

    pipeline: PipelineRankFields
    replica: int
    grad_reduce_ms: list[float]
    """The reduction's time in each timed step."""
    grad_bytes: int


def comparison_parts(
    run: RunOptions, split: SplitOptions, pipeline: PipelineOptions, layout: MeshLayout
) -> dict[str, dict[str, object]]:
    """The runs whose efficiencies the hybrid's is held against (reports/tables.py reads these), each
    at the hybrid's per-device batch: ddp on D devices, and pp on P devices (one replica's pipeline,
    fed one replica's batch) with the same schedule and micro-batches."""
    per_device = run.global_batch // layout.devices
    return {
        "ddp": {"strategy": "ddp", "devices": layout.dp, "batch_size": per_device * layout.dp},
        "pp": {"strategy": "pp", "devices": layout.pp, "batch_size": per_device * layout.pp,
               "microbatches": split.microbatches, "schedule": pipeline.schedule,
               "stages_per_rank": pipeline.stages_per_rank},
    }


class HybridStrategy(Strategy):
    """dp x pp: ``--dp`` replicas of a ``--pp``-rank pipeline on a DeviceMesh, stage gradients averaged."""

    name = "hybrid"
    launch = Launch.PER_DEVICE
    min_devices = 4
    description = "dp x pp on a 2-D DeviceMesh: --dp replicas of a --pp-rank pipeline, stage gradients averaged"
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
        return MeshLayout.for_devices(self.run.devices, self.mesh.dp, self.mesh.pp)

    def validate(self, facts: ModelFacts) -> None:
        try:
            layout = self.layout
            what = f"({layout.dp} data-parallel replicas x {self.split.microbatches} micro-batches)"
            check_divisible(self.run.global_batch, layout.dp * self.split.microbatches, what)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        replica_batch = self.run.global_batch // layout.dp
        check_pipeline(self.run, self.split, self.pipeline, facts, layout.pp, replica_batch)

    def prepare(self, spec: ModelSpec, topo: Topology) -> PipelinePart:
        layout = self.layout
        mesh = layout.build(topo.devices[0].type, topo.rank)
        _, stage_rank = layout.coords(topo.rank)
        # Split first: each replica holds one pp-rank's stages, fed its 1/dp of the batch; then
        # average each part's gradients over its replicas, outermost.
        part = build_pipeline(self.run, self.split, self.pipeline, spec, stage_rank, layout.pp, topo.devices[0],
                              self.run.global_batch // layout.dp, group=mesh.get_group("pp"))
        part.averager = ReplicaAverager(part, mesh.get_group("dp"), self.buckets.bucket_cap_mb)
        return part

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Every rank of a replica takes the replica's shard: the first stage reads the inputs, the last the targets.
        replica, _ = self.layout.coords(topo.rank)
        start, stop = shard_range(len(inputs), replica, self.layout.dp)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        assert isinstance(model, PipelinePart) and model.averager is not None
        timing = model.log.timing
        with timed_step(model.timer, model.log, [model.device]) as clock:
            optimizer.zero_grad(set_to_none=True)
            loss = run_schedule(model, inputs, targets)
            with clock.update():
                scale_gradients(model, self.split.microbatches)
            # The bubble figures are pp's own: of the pipeline's time, the reduction left out.
            clock.excluded_ms = model.averager.reduce([model.device])
            with clock.update():
                self.precision.step(optimizer)
        if timing:
            model.averager.reduce_ms.append(clock.excluded_ms)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        assert isinstance(model, PipelinePart)
        return model.global_state()

    def rank_fields(self, model: nn.Module, topo: Topology) -> HybridRankFields:
        assert isinstance(model, PipelinePart) and model.averager is not None
        replica, _ = self.layout.coords(topo.rank)
        averager = model.averager
        pipeline = pipeline_rank_fields(model, topo.rank)
        return HybridRankFields(pipeline, replica, averager.reduce_ms, averager.grad_bytes)

    def record_fields(self, model: nn.Module, per_rank: Sequence[HybridRankFields]) -> dict[str, object]:
        """pp's figures combined over every rank of every replica (step time: the slowest rank's;
        stage busy times: medians over replicas; bubbles: one per rank), and the reduction's."""
        assert isinstance(model, PipelinePart) and model.averager is not None
        layout = self.layout
        replica_batch = self.run.global_batch // layout.dp
        slowest = [max(step) for step in zip(*(r.grad_reduce_ms for r in per_rank), strict=True)]
        return {
            "dp": layout.dp,
            "pp": layout.pp,
            "rank_layout": LAYOUT,
            "mesh": layout.ranks(),
            "per_replica_batch_size": replica_batch,
            "microbatch_size": replica_batch // self.split.microbatches,
            **pipeline_record_fields(self.split, self.pipeline, model.balance, [r.pipeline for r in per_rank],
                                     layout.pp),
            "grad_reduce_ms": statistics.median(slowest),
            "grad_reduce_ms_per_rank": [statistics.median(r.grad_reduce_ms) for r in per_rank],
            "grad_reduce_bytes_per_rank": [r.grad_bytes for r in per_rank],
            "buckets": len(model.averager.buckets),
            "parts": comparison_parts(self.run, self.split, self.pipeline, layout),
        }
