"""``pp``: pipeline parallelism with torch.distributed.pipelining, one process per rank (torchrun).

The blocks are cut into p*v stages by ``--balance``; rank r builds a PipelineStage around each
of its own pieces (``stages_of_rank``: r, r+p, ... or the V of zbv/dualpipev) and hands them to
the ``--schedule``. We build the stages by hand from our nn.Sequential pieces rather than with
torch's tracer (``pipeline()``): every model here is already a list of blocks, and the pieces
stay the very modules the single-device reference trains.

    p = 2, v = 1, balance [3, 2]       rank 0: blocks 0-2 --activations--> rank 1: blocks 3-4 -> loss
                                              <-----gradients--------

Point-to-point goes over gloo on the CPU and nccl on CUDA (gloo cannot send CUDA tensors).

Loss scaling: the schedule calls the loss function on each micro-batch (a mean over its B/M
samples) and runs each micro-batch's backward on that loss unscaled; ``scale_gradients`` then
divides the accumulated gradients by M, as the schedule's own ``scale_grads=True`` would, but
outside ``schedule.step`` so that the bubble does not count it as idle. So the gradient is
(1/M) * sum_i mean_i grad = (1/B) * sum_samples grad: the single device's mean-loss gradient,
exactly when the M micro-batches are equal (validated), up to fp32 rounding. The loss we report
is likewise the mean of the M micro-batch losses, the batch's mean loss, on the rank that holds
the last stage (None elsewhere). tests/test_pipeline.py checks both against ``single``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn
from torch.torch_version import TorchVersion

from models.spec import ModelSpec
from strategies.action_tables import theoretical_bubble
from strategies.base import Launch, Strategy, Topology
from strategies.devices import peak_memory
from strategies.distributed import backend, default_backend, gather_objects
from strategies.errors import ConfigError
from strategies.options import ModelFacts, PipelineOptions, RunOptions, SplitOptions
from strategies.partition import split_sequential
from strategies.pipeline_cost import PipelineCost
from strategies.pipeline_stage import Contiguous, timed_stage_class
from strategies.precision import Precision
from strategies.schedules import (
    ScheduleInfo,
    available_schedules,
    check_schedule,
    schedule_info,
    stages_of_rank,
)
from strategies.stages import check_split, stage_balance
from strategies.timing import RankTiming, StepLog, StepTimer, pipeline_fields, timed_step

if TYPE_CHECKING:
    from strategies.ddp import ReplicaAverager

V_SHAPE_ON_GLOO_SINCE = (2, 14)
"""The oldest torch whose V-shaped schedules ran here on gloo (2.14.1). On 2.11 their stage set-up
sends each rank a tensor from itself (its two stages are neighbours), which gloo refuses with
"Pair is not connected"; 2.12 and 2.13 are untested, so they are refused as well."""


def torch_refusal(info: ScheduleInfo, backend: str, version: str = torch.__version__) -> str | None:
    """Why this torch cannot run schedule ``info`` over ``backend`` (resolved), or None where it can."""
    if info.v_shape and backend == "gloo" and TorchVersion(version) < ".".join(map(str, V_SHAPE_ON_GLOO_SINCE)):
        since = ".".join(map(str, V_SHAPE_ON_GLOO_SINCE))
        return (f"schedule {info.name!r} on gloo needs torch {since} or newer: torch {version} sends a rank a "
                "tensor from itself while setting up its two stages, which gloo refuses; use interleaved-zb, "
                "or --backend nccl on GPUs")
    return None


def check_p2p_backend(device_type: str, backend: str) -> None:
    """Raises ValueError for a process-group backend that cannot carry this device's tensors point to point."""
    if device_type == "cuda" and backend != "nccl":
        raise ValueError(
            f"pipelines on cuda need the nccl backend: {backend} cannot send CUDA tensors point to point; "
            "use --backend nccl (or auto)"
        )


def check_pipeline(
    run: RunOptions, split: SplitOptions, pipeline: PipelineOptions, facts: ModelFacts, ranks: int, batch: int
) -> None:
    """The checks of a ``ranks``-rank pipeline fed ``batch`` samples, as one-line ConfigErrors."""
    resolved_backend = default_backend(run.accelerator) if run.backend == "auto" else run.backend
    try:
        info = schedule_info(pipeline.schedule, available_schedules())
        check_schedule(info, ranks, pipeline.stages_per_rank, split.microbatches)
        check_p2p_backend(run.accelerator, resolved_backend)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if refusal := torch_refusal(info, resolved_backend):
        raise ConfigError(refusal)
    check_split(split.balance, facts.blocks, ranks * pipeline.stages_per_rank, batch, split.microbatches)


class PipelinePart(nn.Module):
    """One rank's share of a pipeline, standing in for the model: its stages, the schedule that
    drives them, and their timings (torchgpipe's ``GPipe`` holds its partitions the same way)."""

    def __init__(
        self, stages: list[nn.Sequential], block_ids: list[list[int]], stage_ids: list[int], balance: list[int],
        schedule: Any, timer: StepTimer, log: StepLog, device: torch.device,
    ) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.block_ids = block_ids
        """Each stage's blocks, by their index in the whole model."""
        self.stage_ids = stage_ids
        """Global indices of this rank's stages."""
        self.balance = balance
        """Blocks per stage, the same on every rank."""
        self.schedule = schedule
        self.timer = timer
        self.log = log
        self.device = device
        self.averager: ReplicaAverager | None = None
        """hybrid: what averages this part's gradients over its replicas (None in pp)."""

    @property
    def has_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last(self) -> bool:
        return len(self.balance) - 1 in self.stage_ids

    def global_state(self) -> dict[str, torch.Tensor]:
        """The state of these blocks keyed as in the whole model (``3.0.weight``), sharded (DTensor)
        values gathered whole: every rank of their shard and tensor-parallel groups must call."""
        return {
            f"{block}.{key}": value.full_tensor() if hasattr(value, "full_tensor") else value
            for stage, ids in zip(self.stages, self.block_ids, strict=True)
            for local, block in enumerate(ids)
            # ModuleList yields plain Modules to the type checker; these are the Sequentials given to __init__.
            for key, value in cast(nn.Sequential, stage)[local].state_dict().items()
        }


Parallelize = Callable[[nn.Module, nn.Sequential, int], None]
"""Shards one stage in place: (the module the stage runs, the blocks inside it, the index of its first block)."""


def build_pipeline(
    run: RunOptions, split: SplitOptions, pipeline: PipelineOptions, spec: ModelSpec, rank: int, ranks: int,
    device: torch.device, batch: int, group: Any = None, parallelize: Parallelize | None = None,
) -> PipelinePart:
    """``rank``'s stages of a ``ranks``-rank pipeline over ``group`` (None: the whole world), fed ``batch``
    samples a step, and its schedule. ``rank`` counts within ``group``. ``parallelize`` (hybrid's TP and
    FSDP) runs on each stage's module once it is cut and before it becomes a PipelineStage.

    Every process of the run must call this: they agree on one balance (see below).
    """
    check_p2p_backend(device.type, backend() or "none")
    info = schedule_info(pipeline.schedule, available_schedules())
    total = ranks * pipeline.stages_per_rank
    # Every rank must cut at the same blocks: with --balance time each rank profiles, and
    # rank 0's answer is the one all use.
    balance = gather_objects(stage_balance(split.balance, spec, total, batch // split.microbatches, device))[0]
    starts = [sum(balance[:s]) for s in range(total)]
    mine = stages_of_rank(rank, ranks, pipeline.stages_per_rank, info.v_shape)
    pieces = split_sequential(spec.blocks, balance)
    modules = [pieces[s].to(device) for s in mine]
    timer = StepTimer()
    precision = Precision(run.precision, device.type)
    stages = []
    for s, module in zip(mine, modules, strict=True):
        submodule = Contiguous(module)
        # Each stage's forward under autocast, its output back in fp32: the activations that
        # cross between stages, and the loss, stay fp32 (bf16 on the wire would halve the bytes).
        precision.wrap_forward(submodule)
        if parallelize is not None:
            parallelize(submodule, module, starts[s])
        stage = timed_stage_class()(submodule, s, total, device, group=group)
        stage.timer = timer
        stages.append(stage)
    import torch.distributed.pipelining as pipelining

    schedule = getattr(pipelining, info.torch_class)(
        stages if info.multi_stage else stages[0], split.microbatches, loss_fn=spec.loss_fn, scale_grads=False
    )
    block_ids = [list(range(starts[s], starts[s] + balance[s])) for s in mine]
    return PipelinePart(modules, block_ids, mine, balance, schedule, timer, StepLog(run.warmup), device)


def run_schedule(part: PipelinePart, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """One pass of the schedule over all micro-batches: the gradients accumulate, no optimizer step.

    Returns the batch's mean loss on the rank holding the last stage, None elsewhere."""
    losses: list[torch.Tensor] = []
    args = (inputs,) if part.has_first else ()
    kwargs: dict[str, Any] = {"target": targets, "losses": losses} if part.has_last else {}
    part.schedule.step(*args, return_outputs=False, **kwargs)
    # Equal micro-batches: the mean of their mean losses is the batch's mean loss.
    return torch.stack(losses).mean().detach() if part.has_last else None


def scale_gradients(part: PipelinePart, microbatches: int) -> None:
    """Divides this rank's accumulated gradients by the number of micro-batches (what torch's
    ``stage.scale_grads`` does), turning the sum of micro-batch mean gradients into the batch's mean."""
    for p in part.stages.parameters():
        if p.grad is not None:
            p.grad.div_(microbatches)


@dataclass(frozen=True)
class PipelineRankFields:
    """One pipeline rank's figures, sent to the reporting rank."""

    timing: RankTiming
    peak_mem_bytes: int
    """This rank's peak (its device's allocator on CUDA, its process's RSS on the CPU)."""
    stages: list[int]


def pipeline_rank_fields(part: PipelinePart, rank: int) -> PipelineRankFields:
    timing = RankTiming.of(part.log, rank, [part.stage_ids])
    return PipelineRankFields(timing, peak_memory([part.device])[0][0], part.stage_ids)


def pipeline_record_fields(
    split: SplitOptions, pipeline: PipelineOptions, balance: list[int], per_rank: Sequence[PipelineRankFields],
    ranks: int,
) -> dict[str, Any]:
    """pp's record figures for pipelines of ``ranks`` ranks, from every rank's ``PipelineRankFields``."""
    info = schedule_info(pipeline.schedule, available_schedules())
    return {
        "schedule": pipeline.schedule,
        "microbatches": split.microbatches,
        "stages_per_rank": pipeline.stages_per_rank,
        "stages": ranks * pipeline.stages_per_rank,
        "stages_of_rank": [r.stages for r in per_rank],
        "balance": balance,
        "balance_mode": split.balance,
        "backend": backend(),
        "theoretical_bubble_fraction": theoretical_bubble(info, ranks, split.microbatches, pipeline.stages_per_rank),
        **pipeline_fields([r.timing for r in per_rank]),
        "stage_peak_mem_bytes": [r.peak_mem_bytes for r in per_rank],
    }


class PipelineStrategy(Strategy):
    """torch.distributed.pipelining: one process per rank, p*v stages, a named schedule."""

    name = "pp"
    cost_model = PipelineCost()
    min_devices = 2
    launch = Launch.PER_DEVICE
    description = "pipeline parallel (torch.distributed.pipelining): one process per stage, --schedule"
    reads: ClassVar[tuple[type, ...]] = (SplitOptions, PipelineOptions)
    memory_tracking_refusal = (
        "torch's MemTracker cannot follow torch.distributed.pipelining's backward (autograd.grad on stage inputs)"
    )
    fp16_refusal = (
        "needs one gradient scaler over the whole model, and pp keeps its stages in separate processes "
        "(each would skip steps on its own overflows); use bf16 (no loss scaling needed)"
    )

    def __init__(self, run: RunOptions, *, split: SplitOptions, pipeline: PipelineOptions) -> None:
        super().__init__(run)
        self.split = split
        self.pipeline = pipeline

    def validate(self, facts: ModelFacts) -> None:
        check_pipeline(self.run, self.split, self.pipeline, facts, self.run.devices, self.run.global_batch)

    def prepare(self, spec: ModelSpec, topo: Topology) -> PipelinePart:
        return build_pipeline(self.run, self.split, self.pipeline, spec, topo.rank, topo.world_size,
                              topo.devices[0], self.run.global_batch)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        assert isinstance(model, PipelinePart)
        with timed_step(model.timer, model.log, [model.device]) as clock:
            optimizer.zero_grad(set_to_none=True)
            loss = run_schedule(model, inputs, targets)
            with clock.update():
                scale_gradients(model, self.split.microbatches)
                self.precision.step(optimizer)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        assert isinstance(model, PipelinePart)
        return model.global_state()

    def rank_fields(self, model: nn.Module, topo: Topology) -> PipelineRankFields:
        assert isinstance(model, PipelinePart)
        return pipeline_rank_fields(model, topo.rank)

    def record_fields(self, model: nn.Module, per_rank: Sequence[PipelineRankFields]) -> dict[str, Any]:
        assert isinstance(model, PipelinePart)
        return pipeline_record_fields(self.split, self.pipeline, model.balance, per_rank, len(per_rank))
