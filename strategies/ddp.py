"""``ddp``: DistributedDataParallel, one process per device, started by torchrun.

Each rank holds a whole replica and trains on its contiguous shard of the global batch:

    global batch   [ s0 s1 s2 s3 | s4 s5 s6 s7 ]          (B = 8, N = 2)
    rank 0         forward/backward on s0..s3 ──┐
    rank 1         forward/backward on s4..s7 ──┴─ all-reduce (average) gradients, bucket by bucket,
                                                   overlapped with backward; then every rank takes
                                                   the same optimizer step

With a mean-reduced loss and equal shards, the averaged gradient is the gradient of the
global batch's mean loss, so N ranks train exactly like one device (tests/test_ddp.py).
BatchNorm is the exception: each rank normalises with its own shard's statistics, unless
SyncBatchNorm gathers them (CUDA only: torch rejects CPU tensors in SyncBatchNorm).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import (
    FP32,
    BlockCosts,
    CostModel,
    CostSource,
    Scenario,
    StepPrediction,
    own_overhead,
    partly_hidden,
    threads_per_process,
)
from strategies.devices import synchronize
from strategies.distributed import all_reduce_mean, backend, broadcast_from_first
from strategies.errors import ConfigError
from strategies.options import BucketOptions, DDPOptions, ModelFacts, RunOptions
from strategies.shards import check_divisible, shard_range
from strategies.step_memory import BlockHeld, at_largest_moment, by_kind


def apply_ddp(
    model: nn.Module,
    device: torch.device,
    *,
    bucket_cap_mb: float = 25.0,
    gradient_as_bucket_view: bool = False,
    static_graph: bool = False,
    find_unused_parameters: bool = False,
    sync_batchnorm: bool = False,
) -> DistributedDataParallel:
    """Places ``model`` on ``device`` and wraps it in DDP (the process group must exist).

    DDP broadcasts rank 0's parameters and buffers when it is built, so the replicas start
    equal even if the ranks' seeds were not.
    """
    if sync_batchnorm:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(device)
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=bucket_cap_mb,
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
        find_unused_parameters=find_unused_parameters,
    )


class ReplicaAverager:
    """Averages one part's gradients over its replicas, bucket by bucket, after its backward has run.

    DDP's job done by hand, for hybrid's pipeline parts: it is timed on its own (``reduce`` returns
    its milliseconds, which DDP's overlap with the last backward would hide), and it does not depend
    on how a pipeline schedule drives the backward (zero-bubble schedules split it).
    """

    def __init__(self, module: nn.Module, group: dist.ProcessGroup, bucket_cap_mb: float) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = [[params[i] for i in bucket] for bucket in gradient_buckets(params, int(bucket_cap_mb * 2**20))]
        self.buffers = list(module.buffers())
        self.group = group
        self.grad_bytes = sum(p.numel() * p.element_size() for p in params)
        """Bytes of gradient this part reduces each step."""
        self.reduce_ms: list[float] = []
        """The reduction's milliseconds in each timed step (kept by the caller, which knows which are)."""

    def reduce(self, devices: Sequence[torch.device]) -> float:
        """Averages the gradients (buffers follow the first replica's); returns its milliseconds,
        from the backward's end (the devices synchronized first) to the reduction's."""
        synchronize(devices)
        start = time.perf_counter()
        for bucket in self.buckets:
            for p in bucket:
                if p.grad is None:  # keeps the flattened buckets the same shape on every replica
                    p.grad = torch.zeros_like(p)
            all_reduce_mean([p.grad for p in bucket if p.grad is not None], self.group)
        # BatchNorm's statistics follow the first replica's, as DDP's ``broadcast_buffers`` makes them.
        broadcast_from_first(self.buffers, self.group)
        synchronize(devices)
        return (time.perf_counter() - start) * 1e3


def gradient_buckets(params: Sequence[torch.Tensor], cap_bytes: int) -> list[list[int]]:
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


@dataclass(frozen=True)
class DDPRankFields:
    """What a ddp rank reports (the same on every rank)."""

    backend: str | None
    per_rank_batch_size: int


FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES): small, so the first all-reduce
starts early in the backward."""


class DataParallelCost(CostModel):
    """The forward, then the backward with each gradient bucket's all-reduce starting as the bucket fills
    (reverse block order, the first bucket ``FIRST_BUCKET_BYTES``, then ``--bucket-cap-mb``), one at a
    time; what the last all-reduce runs past the backward is exposed; then every rank's update."""

    residual = "ddp_per_step"

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        n = scenario.devices
        threads = threads_per_process(n)
        blocks, slow = costs.blocks(threads), costs.slowdown_for(n)
        samples = scenario.global_batch / n
        forward = (sum(b.forward_ms.at(samples) for b in blocks) + own_overhead(costs, threads, samples)) * slow
        clock, comm_free, bucket, communication = forward, forward, 0.0, 0.0
        cap: float = FIRST_BUCKET_BYTES
        for i in reversed(range(len(blocks))):
            clock += blocks[i].backward_ms.at(samples) * slow
            bucket += blocks[i].parameters * FP32
            if bucket >= cap or i == 0:
                reduce = costs.collective_ms("all_reduce", bucket, n)
                comm_free, communication = max(comm_free, clock) + reduce, communication + reduce
                bucket, cap = 0.0, scenario.bucket_cap_mb * 2**20
        exposed = partly_hidden(max(0.0, comm_free - clock), communication, costs.overlap_for(n))
        parameters = sum(b.parameters for b in blocks)
        # The reducer copies the gradients into its buckets, divides them and copies them back: 3 passes.
        exposed += (costs.runtime_for(n, scenario.global_batch)[DataParallelCost.residual]
                    + 3 * costs.copy_ms(threads, FP32 * parameters) * slow)
        update, after = self.update_ms(costs, scenario, threads, parameters)
        return StepPrediction(clock + exposed + after + update * slow, clock, exposed + after, update * slow)

    def update_ms(self, costs: CostSource, scenario: Scenario, threads: int, parameters: int) -> tuple[float, float]:
        """The optimizer step alone (before the slowdown), and what follows it exposed."""
        return costs.optimizer_ms(threads, parameters), 0.0

    def optimizer_share(self, scenario: Scenario, blocks: Sequence[BlockCosts]) -> float:
        """The share of the optimizer state the rank that holds the most holds."""
        return 1.0

    def batch_share(self, scenario: Scenario) -> float:
        return 1 / scenario.devices

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        parameters = sum(b.parameters for b in blocks)
        samples = scenario.global_batch / scenario.devices
        held = [BlockHeld(FP32 * b.parameters, b.saved_bytes_per_sample * samples, b.output_bytes_per_sample * samples)
                for b in blocks]
        # DDP's buckets hold a copy of the gradients
        kinds = by_kind(parameters, parameters, states * parameters * self.optimizer_share(scenario, blocks),
                        sum(b.saved_bytes_per_sample for b in blocks) * samples, temporaries=FP32 * parameters)
        return at_largest_moment(kinds, held, scenario.backward_peaks, samples, gathered_bytes)


class DistributedDataParallelStrategy(Strategy):
    """DistributedDataParallel: a replica per process, gradients all-reduced during backward."""

    name = "ddp"
    cost_model: ClassVar[CostModel | None] = DataParallelCost()
    splits_the_batch = True
    launch = Launch.PER_DEVICE
    description = "DistributedDataParallel: one process per device (torchrun), gradients all-reduced"
    reads: ClassVar[tuple[type, ...]] = (BucketOptions, DDPOptions)

    def __init__(self, run: RunOptions, *, buckets: BucketOptions, ddp: DDPOptions) -> None:
        super().__init__(run)
        self.buckets = buckets
        self.ddp = ddp

    def validate(self, facts: ModelFacts) -> None:
        # One-process-per-GPU and torchrun's world size are checked for every PER_DEVICE
        # strategy in bench.harness.config.resolve; what is left is ddp's own arithmetic.
        batch, ranks = self.run.global_batch, self.run.devices
        try:
            check_divisible(batch, ranks)
        except ValueError as exc:
            raise ConfigError(f"{exc} (--batch-size {batch}, --devices {ranks})") from None
        if self.ddp.sync_batchnorm and self.run.accelerator != "cuda":
            raise ConfigError(
                "--sync-batchnorm needs CUDA: torch's SyncBatchNorm rejects CPU tensors, so it cannot run on gloo/CPU"
            )

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return apply_ddp(spec.blocks, topo.devices[0], bucket_cap_mb=self.buckets.bucket_cap_mb,
                         **dataclasses.asdict(self.ddp))

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start, stop = shard_range(len(inputs), topo.rank, topo.world_size)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        assert isinstance(model, DistributedDataParallel)
        return model.module.state_dict()

    def rank_fields(self, model: nn.Module, topo: Topology) -> DDPRankFields:
        return DDPRankFields(backend(), self.run.global_batch // self.run.devices)

    def record_fields(self, model: nn.Module, per_rank: Sequence[DDPRankFields]) -> dict[str, Any]:
        return {
            "backend": per_rank[0].backend,
            "per_rank_batch_size": per_rank[0].per_rank_batch_size,
            "bucket_cap_mb": self.buckets.bucket_cap_mb,
            **dataclasses.asdict(self.ddp),
        }
