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

Why an explicit all-reduce after the schedule's step rather than DDP around each stage: it is
timed on its own (``grad_reduce_ms``, which DDP's overlap with the last backward would hide),
and it does not depend on how each schedule drives the backward (zero-bubble schedules split it).

Equivalence: a replica's gradient is the gradient of its shard's mean loss (pp's argument, see
strategies/pipeline.py); the mean over D equal shards is the global batch's mean-loss gradient.
Each replica's last stage returns its shard's mean loss, and the runner's mean over those is the
global mean loss. tests/test_hybrid.py checks both against ``single``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.distributed import (
    all_reduce_mean,
    backend,
    broadcast_from_first,
    device_mesh,
)
from strategies.pipeline import (
    build_pipeline,
    check_p2p_backend,
    check_pipeline,
    pipeline_rank_fields,
    pipeline_record_fields,
    run_schedule,
)
from strategies.shards import check_divisible, shard_range
from strategies.timing import synchronize

if TYPE_CHECKING:
    from bench.config import RunConfig

MESH_DIMS = ("dp", "pp")
"""The mesh's dimension names, outermost first: pp is innermost (see the module docstring)."""

DDP_WRAPPER_OPTIONS = ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "sync_batchnorm")
"""ddp options that configure the DDP wrapper, which hybrid does not use."""


def mesh_shape(devices: int, dp: int | None, pp: int | None) -> tuple[int, int]:
    """``(dp, pp)`` for ``devices``: as given, one filled in from the other, or pp = 2 when neither is.

    Raises ValueError showing the arithmetic when the product is not ``devices``."""
    if dp is None and pp is None:
        pp = 2
    if pp is None:
        pp = devices // max(1, dp or 1)
    if dp is None:
        dp = devices // max(1, pp)
    if dp * pp != devices:
        raise ValueError(f"dp({dp}) * pp({pp}) != devices({devices}); choose --dp and --pp whose product is --devices")
    return dp, pp


def mesh_coords(rank: int, dp: int, pp: int) -> tuple[int, int]:
    """``(replica, stage rank)`` of global ``rank``, pp innermost: rank = replica * pp + stage rank."""
    if not 0 <= rank < dp * pp:
        raise ValueError(f"rank {rank} is outside a {dp} x {pp} mesh")
    return divmod(rank, pp)


def mesh_ranks(dp: int, pp: int) -> list[list[int]]:
    """The global ranks as a dp x pp grid: row d is replica d's pipeline, column s a dp sub-group."""
    return [[d * pp + s for s in range(pp)] for d in range(dp)]


def replica_config(config: RunConfig, dp: int) -> RunConfig:
    """The configuration one replica's pipeline sees: pp's, fed 1/dp of the global batch."""
    return dataclasses.replace(config, batch_size=config.batch_size // dp)  # type: ignore[operator]


def gradient_buckets(params: list[torch.Tensor], cap_bytes: int) -> list[list[int]]:
    """Indices of ``params`` in consecutive buckets of at most ``cap_bytes`` and one dtype (a larger
    tensor gets a bucket of its own): one collective per bucket, as DDP's ``bucket_cap_mb``."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for i, p in enumerate(params):
        nbytes = p.numel() * p.element_size()
        if not buckets or p.dtype != dtype or size + nbytes > cap_bytes:
            buckets.append([])
            size, dtype = 0, p.dtype
        buckets[-1].append(i)
        size += nbytes
    return buckets


def average_over_replicas(buckets: list[list[nn.Parameter]], buffers: list[torch.Tensor], group: Any) -> None:
    """Averages this stage's gradients over its replicas; buffers (BatchNorm's statistics) follow the
    first replica's, as DDP's ``broadcast_buffers`` makes them."""
    for bucket in buckets:
        for p in bucket:
            if p.grad is None:  # keeps the flattened buckets the same shape on every replica
                p.grad = torch.zeros_like(p)
        all_reduce_mean([p.grad for p in bucket], group)  # type: ignore[misc]
    broadcast_from_first(buffers, group)


def comparison_parts(config: RunConfig, dp: int, pp: int) -> dict[str, dict[str, object]]:
    """The runs whose efficiencies the hybrid's is held against: ddp on D devices at this global
    batch, and pp on P devices fed one replica's batch with the same schedule and micro-batches."""
    c = config
    return {
        "ddp": {"strategy": "ddp", "devices": dp, "batch_size": c.batch_size},
        "pp": {"strategy": "pp", "devices": pp, "batch_size": c.batch_size // dp, "microbatches": c.microbatches,  # type: ignore[operator]
               "schedule": c.schedule, "stages_per_rank": c.stages_per_rank},
    }  # fmt: skip


def efficiency_ratio(hybrid_sps: float, ddp_sps: float, pp_sps: float, single_sps: float, dp: int, pp: int) -> float:
    """The hybrid's scaling efficiency over the product of its parts' (1.0: they compose perfectly).

    Efficiency is throughput / (devices x single's throughput): ddp's on dp devices, pp's on pp,
    the hybrid's on dp * pp. Below 1 the hybrid loses more than its parts do apart."""
    hybrid = hybrid_sps / (dp * pp * single_sps)
    return hybrid / ((ddp_sps / (dp * single_sps)) * (pp_sps / (pp * single_sps)))


class HybridStrategy(Strategy):
    """dp x pp: ``--dp`` replicas of a ``--pp``-rank pipeline on a DeviceMesh, stage gradients averaged."""

    name = "hybrid"
    launch = Launch.PER_DEVICE
    min_devices = 4
    description = "dp x pp on a 2-D DeviceMesh: --dp replicas of a --pp-rank pipeline, stage gradients averaged"
    sweep_options = ("microbatches", "schedule")

    def validate(self, gpus_available: int) -> None:
        c = self.config
        try:
            dp, pp = mesh_shape(c.devices, c.dp, c.pp)
            what = f"({dp} data-parallel replicas x {c.microbatches} micro-batches)"
            check_divisible(c.batch_size, dp * c.microbatches, what)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for option in DDP_WRAPPER_OPTIONS:
            if getattr(c, option):
                raise ConfigError(f"--{option.replace('_', '-')} configures the DDP wrapper, which hybrid does not "
                                  "use: it averages each stage's gradients itself after the schedule")  # fmt: skip
        check_pipeline(replica_config(c, dp), pp)

    def setup(self, topo: Topology) -> None:
        check_p2p_backend(topo.devices[0].type, backend() or "none")
        self.shape = self.dp, self.pp = mesh_shape(self.config.devices, self.config.dp, self.config.pp)
        self.mesh: Any = device_mesh(topo.devices[0].type, self.shape, MESH_DIMS)
        self.replica, self.stage_rank = mesh_coords(topo.rank, *self.shape)
        # The layout promised above must be the one torch built, or shards and stages would not match.
        built, expected = (
            (self.mesh.get_local_rank("dp"), self.mesh.get_local_rank("pp")),
            mesh_coords(topo.rank, *self.shape),
        )
        if built != expected:
            raise RuntimeError(f"DeviceMesh put rank {topo.rank} at {built}, expected {expected}")

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        c = self.config
        self.topo = topo
        self.pipe = build_pipeline(
            replica_config(c, self.dp), spec, self.stage_rank, self.pp, topo.devices[0], group=self.mesh.get_group("pp")
        )
        self.dp_group = self.mesh.get_group("dp")
        params = [p for p in self.pipe.part.parameters() if p.requires_grad]
        cap = int(c.bucket_cap_mb * 2**20)
        self.buckets = [[params[i] for i in bucket] for bucket in gradient_buckets(params, cap)]
        self.buffers = list(self.pipe.part.buffers())
        self.grad_bytes = sum(p.numel() * p.element_size() for p in params)
        self.reduce_ms: list[float] = []
        return self.pipe.part

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Every rank of a replica takes the replica's shard: the first stage reads the inputs, the last the targets.
        start, stop = shard_range(len(inputs), self.replica, self.dp)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        pipe, devices = self.pipe, self.topo.devices
        timed = pipe.log.step >= pipe.log.warmup
        start = time.perf_counter()
        pipe.timer.start(devices)
        optimizer.zero_grad(set_to_none=True)
        loss = run_schedule(pipe, inputs, targets)
        synchronize(devices)  # the backward's kernels finish before the reduction's clock starts
        reduce_start = time.perf_counter()
        average_over_replicas(self.buckets, self.buffers, self.dp_group)
        synchronize(devices)
        reduce_ms = (time.perf_counter() - reduce_start) * 1e3
        self.precision.step(optimizer)
        synchronize(devices)
        # The bubble figures are pp's own: of the pipeline's time, the reduction left out.
        pipe.log.add(pipe.timer.spans(), (time.perf_counter() - start) * 1e3 - reduce_ms, pipe.timer.wall_start_s)
        if timed:
            self.reduce_ms.append(reduce_ms)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.global_state()  # type: ignore[operator]

    def rank_fields(self) -> dict[str, object]:
        fields = pipeline_rank_fields(self.pipe, self.topo)
        return {**fields, "replica": self.replica, "grad_reduce_ms": self.reduce_ms, "grad_bytes": self.grad_bytes}

    def record_fields(self, per_rank: list[dict[str, object]]) -> dict[str, object]:
        """pp's figures combined over every rank of every replica (step time: the slowest rank's;
        stage busy times: medians over replicas; bubbles: one per rank), and the reduction's."""
        c, dp, pp = self.config, self.dp, self.pp
        reduce = [r["grad_reduce_ms"] for r in per_rank]
        slowest = [max(step) for step in zip(*reduce, strict=True)]  # type: ignore[call-overload]
        return {
            "dp": dp,
            "pp": pp,
            "rank_layout": "pp innermost: rank = replica * pp + stage rank",
            "mesh": mesh_ranks(dp, pp),
            "per_replica_batch_size": c.batch_size // dp,  # type: ignore[operator]
            "microbatch_size": c.batch_size // (dp * c.microbatches),  # type: ignore[operator]
            **pipeline_record_fields(replica_config(c, dp), self.pipe.balance, per_rank, pp),
            "grad_reduce_ms": statistics.median(slowest),
            "grad_reduce_ms_per_rank": [statistics.median(r) for r in reduce],  # type: ignore[arg-type]
            "grad_reduce_bytes_per_rank": [r["grad_bytes"] for r in per_rank],
            "buckets": len(self.buckets),
            "parts": comparison_parts(c, dp, pp),
        }
