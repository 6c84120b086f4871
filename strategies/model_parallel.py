"""``mp``: the model's blocks split into stages on several devices, driven by one process.

Without micro-batches (``--microbatches 1``) this is the PyTorch model-parallel tutorial's first
version: activations travel stage to stage and only one device works at a time. With M
micro-batches it is the tutorial's pipelined version (``PipelineParallelResNet50``), generalised
to n stages as torchgpipe does: forwards are issued in clock order (micro-batch i on stage s at
clock i + s) and backwards in the reverse order, so on GPUs, where every launch returns at once,
stage s+1 computes micro-batch i while stage s computes micro-batch i+1:

    n = 2, M = 4      forward                  backward
    cuda:0            F0 F1 F2 F3 .            .  B0 B1 B2 B3
    cuda:1            .  F0 F1 F2 F3           B0 B1 B2 B3 .

On a CPU every "device" is the same cores and the host waits for each op, so micro-batches buy
nothing there: the same result, a little slower (the record says ``emulated``).
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

import models
from models.spec import ModelSpec
from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.partition import balance_by_cost, even_balance, explicit_balance, parameter_counts, split_sequential
from strategies.precision import Precision
from strategies.schedules import check_microbatches, clock_cycles, fill_drain_bubble
from strategies.timing import (
    BACKWARD,
    FORWARD,
    StepLog,
    StepTimer,
    peak_bytes,
    pipeline_fields,
    rank_timing_fields,
    synchronize,
)


def count_blocks(config: object) -> int:
    """Blocks of the configured model, built on the meta device (no memory, no arithmetic)."""
    with torch.device("meta"):
        return len(models.build_model(config.model, config.preset, config.norm).blocks)  # type: ignore[attr-defined]


def check_split(config: object, stages: int) -> None:
    """The checks mp and pp share, as one-line ConfigErrors: balance against blocks, micro-batches against batch."""
    try:
        explicit_balance(config.balance, count_blocks(config), stages)  # type: ignore[attr-defined]
        check_microbatches(config.batch_size, config.microbatches)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def profile_block_times(blocks: nn.Sequential, sample: torch.Tensor, device: torch.device) -> list[float]:
    """Seconds of forward + backward of each block on ``sample``, one warm-up pass then one timed.

    Runs on a copy, so BatchNorm's running statistics and the gradients of the real model stay
    untouched and the profiled run still trains exactly like ``single``."""
    blocks = copy.deepcopy(blocks).to(device)
    times = [0.0] * len(blocks)
    for _ in range(2):  # the first pass pays for lazy initialisation; the second is kept
        x = sample.to(device)
        for i, block in enumerate(blocks):
            x = x.detach().requires_grad_(i > 0 and x.is_floating_point())  # as in training: no grad for the data
            synchronize([device])
            start = time.perf_counter()
            y = block(x)
            y.float().sum().backward()
            synchronize([device])
            times[i] = time.perf_counter() - start
            x = y
    return times


def stage_balance(mode: str, spec: ModelSpec, stages: int, micro_batch: int, device: torch.device) -> list[int]:
    """Blocks per stage for ``--balance``: an explicit list, even, by parameter count, or by profiled time."""
    blocks = spec.blocks
    explicit = explicit_balance(mode, len(blocks), stages)
    if explicit is not None:
        return explicit
    if mode == "even":
        return even_balance(len(blocks), stages)
    if mode == "params":
        return balance_by_cost(parameter_counts(blocks), stages)
    sample, _ = spec.make_batch(micro_batch, torch.Generator().manual_seed(0))
    return balance_by_cost(profile_block_times(blocks, sample, device), stages)


class ModelParallel(nn.Module):
    """Stands in for the model: its blocks split into stages, each stage on its device.

    Holds the original ``blocks`` (so ``state_dict`` keys are the single-device ones) and a list
    of stage views onto them (not registered, so nothing is counted twice).
    """

    def __init__(self, blocks: nn.Sequential, balance: list[int], devices: tuple[torch.device, ...]) -> None:
        super().__init__()
        self.blocks = blocks
        self.balance = balance
        self.devices = devices
        self.stages = split_sequential(blocks, balance)
        for stage, device in zip(self.stages, devices, strict=True):
            stage.to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Plain model parallel (evaluation): stage after stage, the activation following."""
        for stage, device in zip(self.stages, self.devices, strict=True):
            x = stage(x.to(device, non_blocking=True))
        return x


def pipelined_step(
    model: ModelParallel,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: nn.Module,
    microbatches: int,
    timer: StepTimer,
    precision: Precision,
) -> torch.Tensor:
    """Forward and backward of one batch in ``microbatches`` pieces; returns the batch's mean loss.

    Every stage runs on a detached copy of its input, so each (stage, micro-batch) backward is a
    separate call that can be issued in pipeline order and timed on its own (as
    torch.distributed.pipelining does per stage).

    Loss scaling: the last stage's micro-batch outputs are concatenated and the loss is the one
    mean over the whole batch, the single device's very expression. Its gradient hands each row
    1/B of its sample's loss gradient, so no 1/M factor is needed, and each parameter's gradient
    is the sum, micro-batch by micro-batch, of exactly the terms one device sums (only the order
    of the additions differs: fp32 rounding).
    """
    n = len(model.stages)
    chunks = inputs.chunk(microbatches)
    stage_in: list[list[torch.Tensor]] = [[] for _ in range(n)]
    stage_out: list[list[torch.Tensor]] = [[] for _ in range(n)]
    for clock in clock_cycles(microbatches, n):
        for i, s in clock:
            device = model.devices[s]
            x = chunks[i] if s == 0 else stage_out[s - 1][i].detach().to(device, non_blocking=True)
            x.requires_grad_(s > 0 and x.is_floating_point())
            with timer.span(s, i, FORWARD, device):
                y = precision.forward(model.stages[s], x)
            stage_in[s].append(x)
            stage_out[s].append(y)
    heads = [y.detach().requires_grad_() for y in stage_out[-1]]
    loss = loss_fn(torch.cat(heads), targets)
    precision.backward(loss)  # fp16: the scaled loss, so every stage's gradients arrive scaled
    for clock in clock_cycles(microbatches, n):
        for i, k in clock:
            s = n - 1 - k
            device = model.devices[s]
            grad = heads[i].grad if s == n - 1 else stage_in[s + 1][i].grad.to(device, non_blocking=True)
            with timer.span(s, i, BACKWARD, device):
                torch.autograd.backward(stage_out[s][i], grad)
    return loss.detach()


class ModelParallelStrategy(Strategy):
    """Model parallel in one process: stages on devices, optionally micro-batched (GPipe wavefront)."""

    name = "mp"
    min_devices = 2
    launch = Launch.IN_PROCESS
    description = "layers split across devices in one process; --microbatches pipelines them (GPipe)"
    sweep_options = ("microbatches", "balance")

    def validate(self, gpus_available: int) -> None:
        c = self.config
        if c.stages_per_rank != 1:
            raise ConfigError(f"mp runs one stage per device, got --stages-per-rank {c.stages_per_rank}")
        if c.schedule != "gpipe":
            raise ConfigError(f"mp runs the GPipe wavefront in one process; --schedule {c.schedule} is for pp")
        check_split(c, c.devices)

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        c = self.config
        micro_batch = c.batch_size // c.microbatches
        balance = stage_balance(c.balance, spec, len(topo.devices), micro_batch, topo.devices[0])
        self.log = StepLog(c.warmup)
        self.timer = StepTimer()
        self.topo = topo
        self.balance = balance
        return ModelParallel(spec.blocks, balance, topo.devices)

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Inputs enter the first stage; the loss, and so the targets, live on the last.
        return inputs.to(topo.devices[0], non_blocking=True), targets.to(topo.devices[-1], non_blocking=True)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor:
        start = time.perf_counter()
        self.timer.start(model.devices)
        optimizer.zero_grad(set_to_none=True)
        loss = pipelined_step(model, inputs, targets, loss_fn, self.config.microbatches, self.timer,  # type: ignore[arg-type]
                              self.precision)  # fmt: skip
        self.precision.step(optimizer)
        synchronize(model.devices)
        self.log.add(self.timer.spans(), (time.perf_counter() - start) * 1e3, self.timer.wall_start_s)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.blocks.state_dict()  # type: ignore[union-attr]

    def rank_fields(self) -> dict[str, object]:
        devices = [[s] for s in range(len(self.topo.devices))]
        return {**rank_timing_fields(self.log, 0, devices), "peak_mem_bytes": peak_bytes(self.topo.devices)}

    def record_fields(self, per_rank: list[dict[str, object]]) -> dict[str, object]:
        c, n = self.config, len(self.topo.devices)
        return {
            "balance": self.balance,
            "balance_mode": c.balance,
            "microbatches": c.microbatches,
            "stages": n,
            "theoretical_bubble_fraction": fill_drain_bubble(n, c.microbatches),
            **pipeline_fields(per_rank),
            "stage_peak_mem_bytes": per_rank[0]["peak_mem_bytes"],
        }
