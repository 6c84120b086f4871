"""The contract between a strategy's cost model and the predictor that prices it.

Each strategy owns its cost model (``Strategy.cost_model``): how its step composes from compute per block
and collectives by size, and what a device holds by kind. The predictor (bench/predict/) supplies the
durations, from a calibration of this machine or a hardware profile, through ``CostSource``; it never asks
which strategy it prices. A strategy whose ``cost_model`` is None is measured but never predicted.

Emulated devices share a CPU: every process computes slower while the others compute, by the source's
``slowdown_for`` that many processes, with its share of the cores' threads (``threads_per_process``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from strategies.action_tables import SimulatedSpan
from strategies.options import OptionSource

if TYPE_CHECKING:
    from models.backward_peaks import BackwardPeak

FP32 = 4
"""Bytes per fp32 element: the parameters, gradients and optimizer state the suite trains in."""


def threads_per_process(processes: int) -> int:
    """CPU threads for each of ``processes`` processes sharing this machine: cores // N, at least 1."""
    return max(1, (os.cpu_count() or 1) // processes)


@dataclass(frozen=True)
class Scenario:
    """The configuration a prediction is for (the options ``bench run`` takes that change its cost)."""

    strategy: str
    devices: int
    global_batch: int
    microbatches: int = 1
    schedule: str = "gpipe"
    stages_per_rank: int = 1
    balance: str = "even"
    bucket_cap_mb: float = 25.0
    reshard_after_forward: bool = True
    dp: int | None = None
    pp: int | None = None
    dp_shard: int | None = None
    tp: int | None = None
    """hybrid's degrees (strategies/mesh.py); None outside hybrid."""
    tp_blocks: tuple[int, ...] = ()
    """tp: the blocks its plan shards, each with one all-reduce pair per row-wise layer (``tp_pairs``)
    and ``tp_layers`` layers the plan parallelizes."""
    tp_pairs: tuple[int, ...] = ()
    tp_layers: tuple[int, ...] = ()
    tp_split_share: tuple[float, ...] = ()
    """tp: per block of the model, the share of its saved activations its plan splits over the ranks (the
    attention's heads, the MLP's hidden: models/sizes.py), whatever precision they are kept in."""
    batch_bytes_per_sample: float = 0.0
    """The bytes of one sample of the model's batch, inputs and targets (models/sizes.py); 0: not counted."""
    backward_peaks: tuple[BackwardPeak, ...] = ()
    """Per block of the model, what it holds at its own backward's largest moment (models/backward_peaks.py);
    empty: not counted, and the step's moments are taken at the blocks' edges."""
    threads: int | None = None
    """The threads each process computes with; None: what the launcher gives it (``threads_per_process``)."""


class Duration(Protocol):
    """Milliseconds by samples (a calibrated line, or a roofline's)."""

    def at(self, samples: float) -> float: ...


class BlockCosts(Protocol):
    """One block of the model as a cost model reads it."""

    @property
    def forward_ms(self) -> Duration: ...
    @property
    def backward_ms(self) -> Duration: ...
    @property
    def parameters(self) -> int: ...
    @property
    def output_bytes_per_sample(self) -> float:
        """The activation that crosses to the next block (a pipeline's transfer per sample)."""
        ...
    @property
    def saved_bytes_per_sample(self) -> float:
        """What its forward keeps for its backward."""
        ...
    def tensor_sizes(self) -> tuple[int, ...]:
        """Each parameter tensor's element count (what moves one tensor at a time)."""
        ...
    def backward_split(self) -> tuple[Duration, Duration] | None:
        """The backward as zero-bubble schedules split it, input gradient (I) then weight gradient (W), where
        measured; None: not measured."""
        ...


class RuntimeOverheads(dict[str, float]):
    """Milliseconds the distributed runtimes add beyond compute and counted communication (hooks, bucketing,
    DTensor dispatch, a schedule's bookkeeping), by term: each cost model's ``residual`` (``ddp_per_step``,
    ``pp_per_action``, ...) in the unit it grows with. A term not measured is zero."""

    def __missing__(self, term: str) -> float:
        return 0.0


class CostSource(Protocol):
    """Where a prediction's durations come from: a calibration of this machine, or a hardware profile."""

    def blocks(self, threads: int) -> Sequence[BlockCosts]: ...
    def optimizer_ms(self, threads: int, parameters: float) -> float: ...
    def copy_ms(self, threads: int, size: float) -> float: ...
    def overhead_ms(self, threads: int, samples: float) -> float: ...
    def slowdown_for(self, processes: float) -> float: ...
    def action_slowdown(self, processes: float) -> float:
        """``slowdown_for`` of an action of a few ms with ``processes`` ranks at work beside it (a pipeline's)."""
        ...
    def collective_ms(self, operation: str, size: float, ranks: int, stride: int = 1) -> float:
        """``operation`` over a group of ``ranks`` global ranks ``stride`` apart (a mesh dimension inside
        others: hybrid's dp_shard group strides over its pp x tp ranks), which decides how many nodes it spans."""
        ...
    def transfer_ms(self, size: float, sender: int, receiver: int, processes: int = 2) -> float:
        """One point-to-point transfer between global ranks ``sender`` and ``receiver`` (a pipeline's
        neighbours) of a run of ``processes``: the link depends on whether they share a node, and on shared
        cores on how many processes there are."""
        ...
    def runtime_for(self, ranks: int, global_batch: float | None = None) -> RuntimeOverheads:
        """The runtimes' residual terms on ``ranks`` processes at ``global_batch`` samples a step (where they were
        measured at more than one; None: at the batch they were measured at)."""
        ...
    def overlap_for(self, ranks: int) -> float: ...
    def residual_across_ranks(self, term: str, samples: float) -> float | None:
        """A residual term the process count does not change (``CostModel.across_ranks_units``), at ``samples`` a
        unit, fitted over every count's reference runs; None: not fitted so (read ``runtime_for`` then)."""
        ...


@dataclass
class StepPrediction:
    """A predicted step: its time, what it is made of, and the pipeline timeline where there is one."""

    step_ms: float
    compute_ms: float
    exposed_comm_ms: float
    update_ms: float
    bubble: float | None = None
    timeline: list[SimulatedSpan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class CostModel:
    """How one strategy's step and memory compose from a ``CostSource``. Subclasses override ``step`` and
    ``memory``; the rest has defaults most keep."""

    residual: str | None = None
    """The runtime term its calibration reference run fits (a ``RuntimeOverheads`` key, per ``runtime_units``);
    None: it has no reference run."""
    across_ranks_units: int | None = None
    """Where set, ``residual`` does not change with the process count (an in-process run's devices are labels): it is
    fitted over the reference runs of every count, by the samples of one of its units, of which a reference step pays
    this many (``CostSource.residual_across_ranks``)."""
    idle_residual: str | None = None
    """The part of ``residual`` the rank spends outside its timed spans (a pipeline's schedule between its
    actions), fitted where the reference run measures its bubble; None: all of it counts as busy."""

    def specialise(self, scenario: Scenario, options: OptionSource, model: str, preset: str, norm: str) -> Scenario:
        """``scenario`` with what this strategy's cost depends on beyond the common options (its mesh, the
        model's tp plan), read from the run's ``options``; ValueError where there is no model for that run."""
        return scenario

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        """The predicted step; ``states`` tensors of optimizer state per parameter."""
        raise NotImplementedError

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        """{kind: bytes} on the device that holds the most; ``gathered_bytes`` per parameter a sharded strategy
        gathers (2 under bf16 mixed precision on a GPU profile)."""
        raise NotImplementedError

    def batch_share(self, scenario: Scenario) -> float:
        """The share of the global batch a rank's step holds (the whole batch unless the strategy splits it)."""
        return 1.0

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        """How many times ``residual`` is paid in a step of ``scenario`` (a model of ``blocks`` blocks)."""
        return 1

    def reference_options(self, ranks: int, microbatches: int) -> dict[str, int] | None:
        """The options beyond the defaults of its reference run on ``ranks`` processes (micro-batch counts as
        ``microbatches``); None where it has none on that many."""
        return {} if self.residual else None

    def reference_variants(self, ranks: int, microbatches: int) -> dict[str, dict[str, int | str]]:
        """Further reference runs on ``ranks`` processes, by name, each with its options beyond the defaults: runs
        whose residual its ``fitted_terms`` names apart (pp's interleaved schedules); none by default."""
        return {}

    def fitted_terms(self, scenario: Scenario) -> tuple[str | None, str | None]:
        """The runtime terms a reference run of ``scenario`` fits: ``residual`` and ``idle_residual``."""
        return self.residual, self.idle_residual


def whole_pass(blocks: Sequence[BlockCosts], ids: Sequence[int] | range, samples: float) -> tuple[float, float]:
    """Forward and backward milliseconds of blocks ``ids`` at ``samples``."""
    return (sum(blocks[i].forward_ms.at(samples) for i in ids), sum(blocks[i].backward_ms.at(samples) for i in ids))


def split_pass(blocks: Sequence[BlockCosts], ids: Sequence[int] | range, samples: float) -> tuple[float, float] | None:
    """Input-gradient and weight-gradient milliseconds of blocks ``ids`` at ``samples``; None where any block's
    split was not measured."""
    splits = [blocks[i].backward_split() for i in ids]
    if any(s is None for s in splits):
        return None
    return (sum(s[0].at(samples) for s in splits if s), sum(s[1].at(samples) for s in splits if s))


def own_overhead(costs: CostSource, threads: int, samples: float) -> float:
    """A whole step's own overhead as the multi-process strategies take it: never below zero, as their
    runtimes' residuals were measured against predictions that took it so."""
    return max(0.0, costs.overhead_ms(threads, samples))


def partly_hidden(exposed: float, communication: float, overlap: float) -> float:
    """The communication a step waits for when only ``overlap`` of what could hide behind compute does:
    ``exposed`` where all of it hides, all of ``communication`` where none does."""
    return exposed + (1 - overlap) * max(0.0, communication - exposed)


REFERENCE_MICROBATCHES = 4
"""The micro-batches of the pipelines' calibration reference runs (bench/predict/runtime.py): a pipeline's per-action
residual is read where its micro-batch is the reference's."""
