"""One measured run: build, place, warm up, time K steps, gather every rank's figures, record."""

from __future__ import annotations

import logging
import os
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

import models
from bench.harness.checkpoint import load_checkpoint, save_checkpoint
from bench.harness.comm import StepBytes
from bench.harness.config import RunConfig
from bench.harness.disturbance import RankLoad, close_window, start_timing
from bench.harness.failures import note_step
from bench.harness.faults import Fault, fault_for
from bench.harness.knobs import apply_model_knobs
from bench.harness.labels import run_label
from bench.harness.memory import MemoryByKind, tracked_steps
from bench.harness.traces import PROFILED_STEPS, profile_path, step_profiler
from models.data import RandomDataset, global_batches
from models.flops import train_flops_per_sample
from strategies import Launch, Strategy, Topology, build_strategy
from strategies.base import OptimizerChoice
from strategies.devices import peak_memory, reset_peak_memory, synchronize
from strategies.distributed import barrier, gather_objects, process_group, torchrun_topology
from strategies.precision import set_tf32

log = logging.getLogger(__name__)

# Distinct global batches in the synthetic dataset: enough for the loss to move from step to
# step, few enough to stay in memory at every preset.
DATASET_BATCHES = 4


@dataclass
class RankStats:
    """What one process measured; the reporting rank combines every rank's."""

    rank: int
    step_times_s: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    peak_mem_bytes: list[int] = field(default_factory=list)
    peak_mem_source: str = ""
    threads: int = 0
    skipped_steps: int = 0
    """Optimizer steps fp16's gradient scaler skipped (0 in other precisions)."""
    strategy_fields: Any = None
    """What this rank's strategy measured beyond step times (``Strategy.rank_fields``: its own type)."""
    load: RankLoad | None = None
    """What this rank saw of the machine over its timed steps (bench/harness/disturbance.py)."""
    memory_by_kind: list[dict[str, Any]] | None = None
    """Peak bytes by kind on each of this rank's devices over the warm-up steps bench/harness/memory.py tracks."""
    memory_error: str | None = None
    trace: str | None = None
    """This rank's torch.profiler trace (``--profile``)."""
    comm_bytes: int | None = None
    """Bytes this rank handed to the communication backend in its last warm-up step (bench/harness/comm.py)."""
    pid: int = field(default_factory=os.getpid)


@dataclass(frozen=True)
class RunResult:
    """The combined figures of a finished run, as the reporting rank sees them."""

    topology: Topology
    ranks: list[RankStats]
    flops_per_sample: int | None
    strategy_fields: dict[str, Any]
    model_state: dict[str, torch.Tensor] | None = None
    """This process's part of the trained model, strategy-free and on the CPU (when asked for)."""


def topology_for(strategy: Strategy, config: RunConfig) -> Topology:
    """Where this process sits: from torchrun's variables for PER_DEVICE strategies, else local."""
    if strategy.launch is Launch.PER_DEVICE:
        return torchrun_topology(config.run.accelerator)
    return strategy.local_topology()


def optimizer_choice(config: RunConfig) -> OptimizerChoice:
    if config.workload.optimizer == "adam":
        return OptimizerChoice(torch.optim.Adam, {"lr": config.workload.lr})
    return OptimizerChoice(torch.optim.SGD, {"lr": config.workload.lr, "momentum": 0.9})


@dataclass
class PreparedRun:
    """Everything a timed loop needs, set up on this process."""

    strategy: Strategy
    topology: Topology
    spec: models.ModelSpec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    dataset: RandomDataset
    flops_per_sample: int | None

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        """One optimizer step on this process's shard, with the devices synchronized after it."""
        loss = self.strategy.train_step(self.model, inputs, targets, self.spec.loss_fn, self.optimizer)
        synchronize(self.topology.devices)
        return loss


def prepared_run(config: RunConfig, strategy: Strategy, topo: Topology) -> PreparedRun:
    """Sets up ``config`` (already resolved) on this process, inside its process group if it has one."""
    if topo.devices[0].type == "cuda":
        set_tf32(config.run.precision)
    if config.knobs.deterministic:
        make_deterministic()
    # Same seed, same initial weights on every rank and in every strategy: the basis of
    # the equivalence checks.
    torch.manual_seed(config.workload.seed)
    spec = models.build_model(config.workload.model, config.workload.preset, config.workload.norm)
    if config.checkpoint.load_checkpoint:
        spec.blocks.load_state_dict(load_checkpoint(config.checkpoint.load_checkpoint, spec.name,
                                                    config.workload.preset))
    flops = _flops_per_sample(config, spec) if topo.rank == 0 else None
    apply_model_knobs(spec, config)
    model = strategy.prepare(spec, topo)
    optimizer = strategy.make_optimizer(model, optimizer_choice(config))
    assert config.run.batch_size is not None, "config comes resolved (resolve fills in batch_size)"
    dataset = RandomDataset(spec, DATASET_BATCHES * config.run.batch_size, seed=config.workload.seed)
    return PreparedRun(strategy, topo, spec, model, optimizer, dataset, flops)


_FLOPS: dict[tuple[str, str, str], int] = {}
"""Each workload's count, once a process: a calibration's reference runs (12 in one group for the small mlp) and
the tests' strategies in one group repeat the workload, and torch's counter takes 0.3 s of a core even for the tiny
models (every operation dispatched through Python on the meta device), a third of a tiny run in one group."""


def _flops_per_sample(config: RunConfig, spec: models.ModelSpec) -> int:
    """``train_flops_per_sample`` of ``spec``, built from ``config``'s workload (its family, preset and norm decide
    every shape; loaded weights and the knobs, applied after, change none)."""
    workload = (config.workload.model, config.workload.preset, config.workload.norm)
    if workload not in _FLOPS:
        _FLOPS[workload] = train_flops_per_sample(spec)
    return _FLOPS[workload]


def make_deterministic() -> None:
    """Same command, same bits: deterministic kernels (an error where none exists), no autotuning.

    cuBLAS needs its workspace fixed before its first call for deterministic matmuls. Seeds are
    set from --seed for the weights and the data in any case.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def train(config: RunConfig, capture_state: bool = False) -> RunResult:
    """Runs ``config`` (already resolved) on this process and returns every rank's figures.

    With ``capture_state`` the result also holds this process's trained parameters, as the
    equivalence checks compare them with the single-device reference's."""
    strategy = build_strategy(config.strategy, config)
    topo = topology_for(strategy, config)
    if strategy.launch is not Launch.PER_DEVICE:
        return _train(config, strategy, topo, capture_state)
    # The group outlives the run's objects (the model, its DDP reducer), which die with _train's frame.
    with process_group(topo, config.measure.timeout_s, config.run.backend):
        return _train(config, strategy, topo, capture_state)


def _train(config: RunConfig, strategy: Strategy, topo: Topology, capture_state: bool) -> RunResult:
    run = prepared_run(config, strategy, topo)
    stats = _timed_steps(run, config)
    stats.strategy_fields = strategy.rank_fields(run.model, topo)
    ranks = sorted(gather_objects(stats), key=lambda s: s.rank)
    state = None
    if capture_state or config.checkpoint.save_checkpoint:
        state = {k: v.detach().to("cpu", copy=True) for k, v in strategy.model_state(run.model).items()}
    if config.checkpoint.save_checkpoint:
        assert state is not None, "captured just above whenever save_checkpoint is set"
        _save_merged(config, run, state)
    fields = strategy.record_fields(run.model, [r.strategy_fields for r in ranks])
    return RunResult(topo, ranks, run.flops_per_sample, fields, state)


def _save_merged(config: RunConfig, run: PreparedRun, state: dict[str, torch.Tensor]) -> None:
    """Rank 0 writes the whole model: replicas agree, and pipeline stages add up to it."""
    merged: dict[str, torch.Tensor] = {}
    for part in gather_objects(state):
        merged.update(part)
    if run.topology.rank == 0:
        ordered = {k: merged[k] for k in run.spec.blocks.state_dict()}  # the model's own key order
        assert config.checkpoint.save_checkpoint is not None, "_save_merged runs only with save_checkpoint set"
        save_checkpoint(config.checkpoint.save_checkpoint, ordered, run.spec.name, config.workload.preset,
                        config.strategy)


COMPILED_REFUSAL = "--compile: compiled blocks' kernels run past the dispatcher that torch's MemTracker watches"
UNTRACKED = "--no-memory-by-kind: not tracked"


def _timed_steps(run: PreparedRun, config: RunConfig) -> RankStats:
    strategy, topo = run.strategy, run.topology
    stats = RankStats(rank=topo.rank, threads=torch.get_num_threads())
    reset_peak_memory(topo.devices)
    assert config.run.batch_size is not None, "config comes resolved (resolve fills in batch_size)"
    batches = global_batches(run.dataset, config.run.batch_size, config.run.warmup + config.measure.steps)
    fault = fault_for(topo.rank)
    memory = MemoryByKind(tracked_steps(config.run.warmup), strategy.memory_refusal()
                          or (COMPILED_REFUSAL if config.knobs.compile else None)
                          or (None if config.measure.memory_by_kind else UNTRACKED))
    profiled = min(PROFILED_STEPS, config.measure.steps)
    trace = profile_path(config.measure.profile, run_label(config.as_dict()),
                         topo.rank) if config.measure.profile else None
    profiler = step_profiler(trace, config.run.warmup + config.measure.steps - profiled, profiled,
                             topo.devices[0].type == "cuda")
    # counted where nothing is timed, and not beside --profile's own profiler
    counted_step = config.run.warmup - 1 if trace is None and run.topology.world_size > 1 else None
    comm = StepBytes()
    if config.run.warmup == 0:
        start_timing()
    with profiler:
        for step, (inputs, targets) in enumerate(batches):
            with comm.counting(topo.devices[0].type == "cuda") if step == counted_step else nullcontext():
                _one_step(run, config, step, inputs, targets, memory, fault, stats)
            if step == config.run.warmup - 1:
                # The timed steps start together. The counted step's profiler is read on each rank for its own
                # while, and a rank that left it first waited for its peers inside its first timed step: fsdp
                # ZeRO-3's, which starts with an all-gather, measured 2x its others (mlp small, 2 ranks).
                barrier()
                start_timing()
            if trace is not None:
                assert isinstance(profiler, torch.profiler.profile), "step_profiler profiles when given a path"
                profiler.step()
    stats.comm_bytes = comm.bytes
    stats.trace = str(trace) if trace is not None else None
    stats.load = close_window()
    stats.memory_by_kind, stats.memory_error = memory.peaks, memory.error
    stats.peak_mem_bytes, stats.peak_mem_source = peak_memory(topo.devices)
    stats.skipped_steps = strategy.precision.skipped_steps
    return stats


def _one_step(run: PreparedRun, config: RunConfig, step: int, inputs: torch.Tensor, targets: torch.Tensor,
              memory: MemoryByKind, fault: Fault | None, stats: RankStats) -> None:
    strategy, topo = run.strategy, run.topology
    try:
        if fault is not None and fault.step == step:
            fault.trigger(topo.rank)
        # Moving this process's shard to its devices stays outside the clock: the suite times
        # the strategies, not the input pipeline.
        if config.knobs.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        inputs, targets = strategy.shard_batch(inputs, targets, topo)
        synchronize(topo.devices)
        start = time.perf_counter()
        if step in memory.steps and not memory.error:  # untimed: the tracker slows every op
            with memory.track(run.model, run.optimizer, run.spec.loss_fn, (inputs, targets)):
                loss = run.step(inputs, targets)
        else:
            loss = run.step(inputs, targets)
        elapsed = time.perf_counter() - start
    except BaseException as exc:
        note_step(exc, step)  # for the one line that says where a failed run failed
        raise
    stats.losses.append(None if loss is None else float(loss))
    if step >= config.run.warmup:
        stats.step_times_s.append(elapsed)
    if topo.rank == 0:
        log.debug("step %d: %.1f ms", step, elapsed * 1e3)


def step_times_ms(ranks: list[RankStats]) -> list[float]:
    """Per-step time of the whole run: the slowest rank's, since every rank waits for it."""
    return [max(times) * 1e3 for times in zip(*(r.step_times_s for r in ranks), strict=True)]


def global_losses(ranks: list[RankStats]) -> list[float]:
    """Per-step global-batch loss: the mean over the ranks that computed one.

    Every such rank holds an equal share of the global batch (data-parallel shards, or a
    pipeline's last stage per replica), so their mean is the loss of the whole batch.
    """
    per_step = zip(*(r.losses for r in ranks), strict=True)
    return [statistics.fmean(v for v in step if v is not None) for step in per_step]
