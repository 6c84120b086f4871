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

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from models.spec import ModelSpec
from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.distributed import backend
from strategies.shards import check_divisible, shard_range


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


class DistributedDataParallelStrategy(Strategy):
    """DistributedDataParallel: a replica per process, gradients all-reduced during backward."""

    name = "ddp"
    launch = Launch.PER_DEVICE
    description = "DistributedDataParallel: one process per device (torchrun), gradients all-reduced"


    def validate(self, gpus_available: int) -> None:
        # One-process-per-GPU and torchrun's world size are checked for every PER_DEVICE
        # strategy in bench.config.resolve; what is left is ddp's own arithmetic.
        batch, ranks = self.config.batch_size, self.config.devices
        try:
            check_divisible(batch, ranks)
        except ValueError as exc:
            raise ConfigError(f"{exc} (--batch-size {batch}, --devices {ranks})") from None
        if self.config.sync_batchnorm and self.config.accelerator != "cuda":
            raise ConfigError(
                "--sync-batchnorm needs CUDA: torch's SyncBatchNorm rejects CPU tensors, so it cannot run on gloo/CPU"
            )

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        c = self.config
        return apply_ddp(
            spec.blocks,
            topo.devices[0],
            bucket_cap_mb=c.bucket_cap_mb,
            gradient_as_bucket_view=c.gradient_as_bucket_view,
            static_graph=c.static_graph,
            find_unused_parameters=c.find_unused_parameters,
            sync_batchnorm=c.sync_batchnorm,
        )

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start, stop = shard_range(len(inputs), topo.rank, topo.world_size)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.module.state_dict()  # type: ignore[union-attr]

    def rank_fields(self) -> dict[str, object]:
        c = self.config
        return {
            "backend": backend(),
            "per_rank_batch_size": c.batch_size // c.devices,
            "bucket_cap_mb": c.bucket_cap_mb,
            "gradient_as_bucket_view": c.gradient_as_bucket_view,
            "static_graph": c.static_graph,
            "find_unused_parameters": c.find_unused_parameters,
            "sync_batchnorm": c.sync_batchnorm,
        }
