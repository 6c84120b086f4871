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
samples), runs each micro-batch's backward on that loss unscaled, and with ``scale_grads=True``
divides the accumulated gradients by M after the last backward. So the gradient is
(1/M) * sum_i mean_i grad = (1/B) * sum_samples grad: the single device's mean-loss gradient,
exactly when the M micro-batches are equal (validated), up to fp32 rounding. The loss we report
is likewise the mean of the M micro-batch losses, the batch's mean loss, on the rank that holds
the last stage (None elsewhere). tests/test_pipeline.py checks both against ``single``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.torch_version import TorchVersion

from models.spec import ModelSpec
from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.distributed import (
    backend,
    default_backend,
    gather_objects,
)
from strategies.model_parallel import check_split, stage_balance
from strategies.partition import split_sequential
from strategies.precision import Precision
from strategies.schedules import (
    ScheduleInfo,
    available_schedules,
    check_schedule,
    schedule_info,
    stages_of_rank,
    theoretical_bubble,
)
from strategies.timing import (
    BACKWARD,
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    FORWARD,
    StepLog,
    StepTimer,
    peak_bytes,
    pipeline_fields,
    rank_timing_fields,
    synchronize,
)

if TYPE_CHECKING:
    from bench.config import RunConfig


def check_p2p_backend(device_type: str, backend: str) -> None:
    """Raises ValueError for a process-group backend that cannot carry this device's tensors point to point."""
    if device_type == "cuda" and backend != "nccl":
        raise ValueError(
            f"pipelines on cuda need the nccl backend: {backend} cannot send CUDA tensors point to point; "
            "use --backend nccl (or auto)"
        )


V_SHAPE_ON_GLOO_SINCE = (2, 14)
"""The oldest torch whose V-shaped schedules ran here on gloo (2.14.1). On 2.11 their stage set-up
sends each rank a tensor from itself (its two stages are neighbours), which gloo refuses with
"Pair is not connected"; 2.12 and 2.13 are untested, so they are refused as well."""


def torch_refusal(info: ScheduleInfo, backend: str, version: str = torch.__version__) -> str | None:
    """Why this torch cannot run schedule ``info`` over ``backend`` (resolved), or None where it can."""
    if info.v_shape and backend == "gloo" and TorchVersion(version) < V_SHAPE_ON_GLOO_SINCE:
        since = ".".join(map(str, V_SHAPE_ON_GLOO_SINCE))
        return (f"schedule {info.name!r} on gloo needs torch {since} or newer: torch {version} sends a rank a "
                "tensor from itself while setting up its two stages, which gloo refuses; use interleaved-zb, "
                "or --backend nccl on GPUs")  # fmt: skip
    return None


def timed_stage_class() -> type:
    """A PipelineStage that times each compute call it is asked for.

    Why here and not with module hooks: every compute action of every schedule goes through these
    three methods (F, B; and I then W for zero-bubble schedules, which split the backward with
    their own graph walk that a custom autograd Function inside the stage would break), and
    nothing else does: the point-to-point transfers happen in the schedule, between the calls.
    """
    from torch.distributed.pipelining import PipelineStage

    class TimedStage(PipelineStage):
        timer: StepTimer

        def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            with self.timer.span(self.stage_index, fwd_chunk_id, FORWARD, self.device):
                return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

        def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            full = kwargs.get("full_backward", args[1] if len(args) > 1 else True)
            with self.timer.span(self.stage_index, bwd_chunk_id, BACKWARD if full else BACKWARD_INPUT, self.device):
                return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)

        def backward_weight_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            with self.timer.span(self.stage_index, bwd_chunk_id, BACKWARD_WEIGHT, self.device):
                return super().backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs)

    return TimedStage


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class Contiguous(nn.Module):
    """Runs ``module`` with a contiguous output and a contiguous input gradient.

    The receiving rank allocates its buffer with the strides the sender's tensor had, and gloo
    refuses strided buffers: an LSTM's batch-first output, and the gradient of its input, are views.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            x = _ContiguousGrad.apply(x)
        return self.module(x).contiguous()


class PipelinePart(nn.Module):
    """This rank's stages; ``block_ids`` maps each stage's blocks back to their index in the whole model."""

    def __init__(self, stages: list[nn.Sequential], block_ids: list[list[int]]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.block_ids = block_ids

    def global_state(self) -> dict[str, torch.Tensor]:
        """The state of these blocks keyed as in the whole model (``3.0.weight``)."""
        return {
            f"{block}.{key}": value
            for stage, ids in zip(self.stages, self.block_ids, strict=True)
            for local, block in enumerate(ids)
            for key, value in stage[local].state_dict().items()
        }


def check_pipeline(config: RunConfig, ranks: int) -> None:
    """pp's checks for a ``ranks``-rank pipeline fed ``config.batch_size`` samples, as one-line ConfigErrors."""
    c = config
    try:
        info = schedule_info(c.schedule, available_schedules())
        check_schedule(info, ranks, c.stages_per_rank, c.microbatches)
        check_p2p_backend(c.accelerator, c.backend)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if refusal := torch_refusal(info, default_backend(c.accelerator) if c.backend == "auto" else c.backend):
        raise ConfigError(refusal)
    check_split(c, ranks * c.stages_per_rank)


@dataclass
class Pipeline:
    """One rank's share of a pipeline: its stages, the schedule that drives them, and their timings."""

    part: PipelinePart
    schedule: Any
    stages: list[int]
    """Global indices of this rank's stages."""
    balance: list[int]
    """Blocks per stage, the same on every rank."""
    timer: StepTimer
    log: StepLog

    @property
    def has_first(self) -> bool:
        return 0 in self.stages

    @property
    def has_last(self) -> bool:
        return len(self.balance) - 1 in self.stages


def build_pipeline(
    config: RunConfig, spec: ModelSpec, rank: int, ranks: int, device: torch.device, group: Any = None
) -> Pipeline:
    """``rank``'s stages of a ``ranks``-rank pipeline over ``group`` (None: the whole world), and its schedule.

    ``rank`` counts within ``group``; ``config.batch_size`` is the batch this pipeline is fed.
    Every process of the run must call this: they agree on one balance (see below).
    """
    c = config
    info = schedule_info(c.schedule, available_schedules())
    total = ranks * c.stages_per_rank
    # Every rank must cut at the same blocks: with --balance time each rank profiles, and
    # rank 0's answer is the one all use.
    balance = gather_objects(stage_balance(c.balance, spec, total, c.batch_size // c.microbatches, device))[0]
    starts = [sum(balance[:s]) for s in range(total)]
    mine = stages_of_rank(rank, ranks, c.stages_per_rank, info.v_shape)
    pieces = split_sequential(spec.blocks, balance)
    modules = [pieces[s].to(device) for s in mine]
    timer = StepTimer()
    precision = Precision(c.precision, device.type)
    stage_class = timed_stage_class()
    stages = []
    for s, module in zip(mine, modules, strict=True):
        submodule = Contiguous(module)
        # Each stage's forward under autocast, its output back in fp32: the activations that
        # cross between stages, and the loss, stay fp32 (bf16 on the wire would halve the bytes).
        precision.wrap_forward(submodule)
        stage = stage_class(submodule, s, total, device, group=group)
        stage.timer = timer
        stages.append(stage)
    import torch.distributed.pipelining as pipelining

    schedule_class = getattr(pipelining, info.torch_class)
    schedule = schedule_class(
        stages if info.multi_stage else stages[0], c.microbatches, loss_fn=spec.loss_fn, scale_grads=True
    )
    part = PipelinePart(modules, [list(range(starts[s], starts[s] + balance[s])) for s in mine])
    return Pipeline(part, schedule, mine, balance, timer, StepLog(c.warmup))


def run_schedule(pipe: Pipeline, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """One pass of the schedule over all micro-batches: the gradients accumulate, no optimizer step.

    Returns the batch's mean loss on the rank holding the last stage, None elsewhere."""
    losses: list[torch.Tensor] = []
    args = (inputs,) if pipe.has_first else ()
    kwargs: dict[str, Any] = {"target": targets, "losses": losses} if pipe.has_last else {}
    pipe.schedule.step(*args, return_outputs=False, **kwargs)
    # Equal micro-batches: the mean of their mean losses is the batch's mean loss.
    return torch.stack(losses).mean().detach() if pipe.has_last else None


def pipeline_rank_fields(pipe: Pipeline, topo: Topology) -> dict[str, object]:
    """This rank's timings, peak memory and stages, for ``pipeline_record_fields``."""
    fields = rank_timing_fields(pipe.log, topo.rank, [pipe.stages])
    return {**fields, "peak_mem_bytes": peak_bytes(topo.devices), "stages": pipe.stages}


def pipeline_record_fields(
    config: RunConfig, balance: list[int], per_rank: list[dict[str, object]], ranks: int
) -> dict[str, object]:
    """pp's record figures for pipelines of ``ranks`` ranks, from every rank's ``pipeline_rank_fields``."""
    c = config
    return {
        "schedule": c.schedule,
        "microbatches": c.microbatches,
        "stages_per_rank": c.stages_per_rank,
        "stages": ranks * c.stages_per_rank,
        "stages_of_rank": [r["stages"] for r in per_rank],
        "balance": balance,
        "balance_mode": c.balance,
        "backend": backend(),
        "theoretical_bubble_fraction": theoretical_bubble(
            schedule_info(c.schedule, available_schedules()), ranks, c.microbatches, c.stages_per_rank
        ),
        **pipeline_fields(per_rank),
        "stage_peak_mem_bytes": [r["peak_mem_bytes"][0] for r in per_rank],  # type: ignore[index]
    }


class PipelineStrategy(Strategy):
    """torch.distributed.pipelining: one process per rank, p*v stages, a named schedule."""

    name = "pp"
    min_devices = 2
    launch = Launch.PER_DEVICE
    description = "pipeline parallel (torch.distributed.pipelining): one process per stage, --schedule"
    sweep_options = ("microbatches", "schedule", "stages_per_rank", "balance")


    def validate(self, gpus_available: int) -> None:
        check_pipeline(self.config, self.config.devices)

    def setup(self, topo: Topology) -> None:
        check_p2p_backend(topo.devices[0].type, backend() or "none")

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        self.topo = topo
        self.pipe = build_pipeline(self.config, spec, topo.rank, topo.world_size, topo.devices[0])
        return self.pipe.part

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        pipe = self.pipe
        start = time.perf_counter()
        pipe.timer.start(self.topo.devices)
        optimizer.zero_grad(set_to_none=True)
        loss = run_schedule(pipe, inputs, targets)
        self.precision.step(optimizer)
        synchronize(self.topo.devices)
        pipe.log.add(pipe.timer.spans(), (time.perf_counter() - start) * 1e3, pipe.timer.wall_start_s)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.global_state()  # type: ignore[operator]

    def rank_fields(self) -> dict[str, object]:
        return pipeline_rank_fields(self.pipe, self.topo)

    def record_fields(self, per_rank: list[dict[str, object]]) -> dict[str, object]:
        return pipeline_record_fields(self.config, self.pipe.balance, per_rank, len(per_rank))
