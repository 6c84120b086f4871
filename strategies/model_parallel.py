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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import (
    FP32,
    REFERENCE_MICROBATCHES,
    BlockCosts,
    CostSource,
    Scenario,
    threads_per_process,
)
from strategies.devices import peak_memory
from strategies.options import ModelFacts, RunOptions, SplitOptions
from strategies.partition import split_sequential
from strategies.precision import Precision
from strategies.schedules import clock_cycles, fill_drain_bubble
from strategies.single import WholeModelCost
from strategies.stage_split import largest_stage
from strategies.stages import check_split, stage_balance
from strategies.timing import BACKWARD, FORWARD, RankTiming, StepLog, StepTimer, pipeline_fields, timed_step


class ModelParallel(nn.Module):
    """Stands in for the model: its blocks split into stages, each stage on its device, and the
    stages' timings.

    Holds the original ``blocks`` (so ``state_dict`` keys are the single-device ones) and a list
    of stage views onto them (not registered, so nothing is counted twice).
    """

    def __init__(
        self, blocks: nn.Sequential, balance: list[int], devices: tuple[torch.device, ...], warmup: int
    ) -> None:
        super().__init__()
        self.blocks = blocks
        self.balance = balance
        self.devices = devices
        self.stages = split_sequential(blocks, balance)
        for stage, device in zip(self.stages, devices, strict=True):
            stage.to(device)
        self.timer = StepTimer()
        self.log = StepLog(warmup)

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
            upstream = heads[i] if s == n - 1 else stage_in[s + 1][i]
            assert upstream.grad is not None, "the later stage's backward leaves its input's gradient"
            grad = upstream.grad.to(device, non_blocking=True)
            with timer.span(s, i, BACKWARD, device):
                torch.autograd.backward(stage_out[s][i], grad)
    return loss.detach()


@dataclass(frozen=True)
class ModelParallelRankFields:
    timing: RankTiming
    peak_mem_bytes: list[int]


def threads_term(term: str, threads: int | None) -> str:
    """The name of ``term`` as measured in a process of ``threads`` intra-op threads: ``term`` itself for every core
    (None, as a sweep's one-process run computes), else ``mp_per_microbatch_1_thread``.

    What mp's step takes beyond its blocks differs with its threads, as the blocks' own times are measured at each:
    on the 2-core VM (the small mlp, 2 stages, 4 micro-batches, blocks of one calibration) at 1 thread 2.4, 3.4 and
    2.8 ms a micro-batch at batches 8, 256 and 384, at 2 threads 0.2, -4.0 and 0.9; ``bench fidelity`` times mp as
    one pp rank (1 thread), and read at every core's its account of pp's gap came out 12 and 6 points below the
    measured intervals (M=4 and 8).
    """
    if threads is None or threads == threads_per_process(1):
        return term
    return f"{term}_{threads}_thread{'s' if threads > 1 else ''}"


class StagesInTurnCost(WholeModelCost):
    """Each micro-batch a pass of its own through every block, the stages taking turns as its devices do,
    each paying mp's own runtime (the hand-over between stages, the micro-batch's slicing and loss), measured
    in one process at each stage count; every stage holds all its micro-batches' activations."""

    residual = "mp_per_microbatch"
    across_ranks_units = REFERENCE_MICROBATCHES

    def passes(self, scenario: Scenario) -> int:
        return scenario.microbatches

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        return scenario.microbatches

    def fitted_terms(self, scenario: Scenario) -> tuple[str | None, str | None]:
        return threads_term(str(self.residual), scenario.threads), None

    def per_pass_residual(self, costs: CostSource, scenario: Scenario) -> float:
        # Read at the run's micro-batch: read at its global batch, m = 8 paid the residual of micro-batches twice its
        # own (the eleventh target sweep's cnn m = 8 at 2 devices 38% over, 13% read so). Fitted over every stage
        # count's reference runs: mp's stages are one process's labels, and one count's pair of runs, taken minutes
        # apart from the other's, put the transformer's at 4 stages 23 ms a micro-batch above its 2 (docs/predictor.md).
        # Each thread count's own where it was measured (``threads_term``), else every core's.
        samples = scenario.global_batch / scenario.microbatches
        for term in dict.fromkeys((threads_term(str(self.residual), scenario.threads), str(self.residual))):
            across = costs.residual_across_ranks(term, samples)
            if across is not None:
                return across
            runtime = costs.runtime_for(scenario.devices, samples * REFERENCE_MICROBATCHES)
            if term in runtime:
                return runtime[term]
        return 0.0

    def reference_options(self, ranks: int, microbatches: int) -> dict[str, int] | None:
        return {"microbatches": microbatches}

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        return largest_stage(blocks, scenario, states, replicas=1, all_in_flight=True)


class ModelParallelStrategy(Strategy):
    """Model parallel in one process: stages on devices, optionally micro-batched (GPipe wavefront)."""

    name = "mp"
    cost_model = StagesInTurnCost()
    min_devices = 2
    launch = Launch.IN_PROCESS
    description = "layers split across devices in one process; --microbatches pipelines them (GPipe)"
    reads: ClassVar[tuple[type, ...]] = (SplitOptions,)

    def __init__(self, run: RunOptions, *, split: SplitOptions) -> None:
        super().__init__(run)
        self.split = split

    def memory_refusal(self) -> str | None:
        if self.split.microbatches > 1:
            return "torch's MemTracker does not follow a stage called once per micro-batch (m > 1)"
        return None

    def validate(self, facts: ModelFacts) -> None:
        check_split(self.split.balance, facts.blocks, self.run.devices, self.run.global_batch, self.split.microbatches)

    def prepare(self, spec: ModelSpec, topo: Topology) -> ModelParallel:
        micro_batch = self.run.global_batch // self.split.microbatches
        balance = stage_balance(self.split.balance, spec, len(topo.devices), micro_batch, topo.devices[0])
        return ModelParallel(spec.blocks, balance, topo.devices, self.run.warmup)

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
        assert isinstance(model, ModelParallel)
        with timed_step(model.timer, model.log, model.devices) as clock:
            optimizer.zero_grad(set_to_none=True)
            loss = pipelined_step(model, inputs, targets, loss_fn, self.split.microbatches, model.timer,
                                  self.precision)
            with clock.update():
                self.precision.step(optimizer)
        return loss

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        assert isinstance(model, ModelParallel)
        return model.blocks.state_dict()

    def rank_fields(self, model: nn.Module, topo: Topology) -> ModelParallelRankFields:
        assert isinstance(model, ModelParallel)
        stages_by_device = [[s] for s in range(len(model.devices))]
        return ModelParallelRankFields(RankTiming.of(model.log, 0, stages_by_device), peak_memory(model.devices)[0])

    def record_fields(self, model: nn.Module, per_rank: Sequence[ModelParallelRankFields]) -> dict[str, Any]:
        assert isinstance(model, ModelParallel)
        n = len(model.devices)
        return {
            "balance": model.balance,
            "balance_mode": self.split.balance,
            "microbatches": self.split.microbatches,
            "stages": n,
            "theoretical_bubble_fraction": fill_drain_bubble(n, self.split.microbatches),
            **pipeline_fields([r.timing for r in per_rank]),
            "stage_peak_mem_bytes": per_rank[0].peak_mem_bytes,
        }
