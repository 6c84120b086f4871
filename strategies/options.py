"""What strategies read: small frozen option groups, each a section of the command line.

A strategy declares the groups it reads (``Strategy.reads``) and receives exactly those, as
keyword arguments, so it is never handed a setting that does not concern it. The harness
(bench/harness/config.py) holds each group as a section of its ``RunConfig`` under the group's ``key``
(``config.pipeline.schedule``), generates one flag per field, and refuses a flag of a group the
chosen strategy does not read:

    group             flags                                              read by
    RunOptions        --devices --accelerator --batch-size --precision   every strategy
                      --backend --warmup
    SplitOptions      --balance --microbatches                           mp, pp, hybrid
    PipelineOptions   --schedule --stages-per-rank                       pp, hybrid
    MeshOptions       --dp --dp-shard --pp --tp                          hybrid
    BucketOptions     --bucket-cap-mb                                    ddp, hybrid
    DDPOptions        --gradient-as-bucket-view --static-graph           ddp, zero1
                      --find-unused-parameters --sync-batchnorm
    FSDPOptions       --reshard-after-forward                            fsdp
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from models.spec import TensorParallelPlan

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class OptionGroup(DataclassInstance, Protocol):
        """An option group: a dataclass that names its section of the configuration (and its
        strategy's ``__init__`` keyword) as ``key``."""

        key: ClassVar[str]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What every strategy reads: the devices, the batch and the arithmetic."""

    key: ClassVar[str] = "run"

    devices: int = 1
    """Devices the run uses: GPUs, or emulated devices on the CPU."""
    accelerator: str = "auto"
    """cuda, cpu, or auto (cuda when present, else cpu)."""
    batch_size: int | None = None
    """Global batch per optimizer step (default: the preset's)."""
    precision: str = "auto"
    """fp32, tf32 (CUDA), bf16 or fp16 (autocast; fp16 with a gradient scaler); auto: bf16 on CUDA, fp32 on CPU."""
    backend: str = "auto"
    """Process-group backend of per-device strategies: gloo, nccl, or auto (nccl on CUDA, gloo on the CPU)."""
    warmup: int = 3
    """Untimed optimizer steps before the timed ones."""

    @property
    def global_batch(self) -> int:
        """``batch_size`` once resolved (bench.harness.config.resolve fills in the preset's)."""
        if self.batch_size is None:
            raise ValueError("batch_size is filled in by resolve() before a strategy runs")
        return self.batch_size


@dataclass(frozen=True, kw_only=True)
class SplitOptions:
    """How the model is cut into stages and the batch into micro-batches (mp, pp, hybrid)."""

    key: ClassVar[str] = "split"

    balance: str = "even"
    """Blocks per stage, e.g. 3,2,2; or even, params (by parameter count), time (by profiled time)."""
    microbatches: int = 1
    """Micro-batches per global batch (mp, pp, hybrid)."""


@dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    """Which torch.distributed.pipelining schedule drives the stages (pp, hybrid)."""

    key: ClassVar[str] = "pipeline"

    schedule: str = "gpipe"
    """Pipeline schedule (pp, hybrid); `python -m bench list` shows those this torch offers."""
    stages_per_rank: int = 1
    """Pipeline stages per rank, for interleaved schedules (v)."""


@dataclass(frozen=True, kw_only=True)
class MeshOptions:
    """The degrees of a multi-dimensional run (hybrid); their product is --devices (strategies/mesh.py)."""

    key: ClassVar[str] = "mesh"

    dp: int | None = None
    """hybrid: data-parallel replicas, each holding whole parameters (default: what the other degrees leave)."""
    dp_shard: int | None = None
    """hybrid: FSDP ranks each replica's parameters are sharded over (default: 1)."""
    pp: int | None = None
    """hybrid: pipeline ranks (default: what the others leave; 2 when no degree is given)."""
    tp: int | None = None
    """hybrid: tensor-parallel ranks each layer of the model's plan is split over (default: 1)."""


@dataclass(frozen=True, kw_only=True)
class BucketOptions:
    """How gradients are grouped for their all-reduce (ddp, and hybrid's own reducer)."""

    key: ClassVar[str] = "buckets"

    bucket_cap_mb: float = 25.0
    """DDP gradient bucket size in MiB."""


@dataclass(frozen=True, kw_only=True)
class DDPOptions:
    """Settings of the DistributedDataParallel wrapper (ddp only: hybrid averages its stages itself)."""

    key: ClassVar[str] = "ddp"

    gradient_as_bucket_view: bool = False
    """DDP: gradients as views into the communication buckets (saves a copy)."""
    static_graph: bool = False
    """DDP: the graph is the same every step (enables more overlap)."""
    find_unused_parameters: bool = False
    """DDP: look for parameters that got no gradient (slower; needed by some models)."""
    sync_batchnorm: bool = False
    """Convert BatchNorm to SyncBatchNorm (ddp): batch statistics over the global batch."""


@dataclass(frozen=True, kw_only=True)
class FSDPOptions:
    """How FSDP2 (``fully_shard``) holds the parameters between a block's forward and its backward (fsdp)."""

    key: ClassVar[str] = "fsdp"

    reshard_after_forward: bool = True
    """fsdp: free each block's gathered parameters after its forward and gather them again for its
    backward (ZeRO-3); --no-reshard-after-forward keeps them until the backward (ZeRO-2)."""


OPTION_GROUPS: tuple[type[OptionGroup], ...] = (RunOptions, SplitOptions, PipelineOptions, MeshOptions, BucketOptions,
                                                DDPOptions,
                                   FSDPOptions)
"""Every group, in the order of the table above."""

Group = TypeVar("Group", bound="OptionGroup")


class OptionSource(Protocol):
    """Anything that can hand out option groups (bench's RunConfig, a test's own)."""

    def group(self, cls: type[Group]) -> Group: ...


@dataclass(frozen=True)
class ModelFacts:
    """What a strategy's checks need to know of the model, found once before any process starts."""

    blocks: int
    """Blocks of the model's nn.Sequential (what balance lists and stages cut)."""
    gpus: int
    """GPUs this machine has."""
    tp_plan: TensorParallelPlan | None = None
    """The model family's tensor-parallel plan, if it has one."""
    layer_types: tuple[str, ...] = ()
    """Class names of the layers that hold parameters other than nn.Linear (what a plan cannot shard)."""
