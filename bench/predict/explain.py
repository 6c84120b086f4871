"""Why a pipeline reaches less than the ideal p*m/(m+p-1) over running its stages one after another.

The ideal assumes equal stages, free transfers and a runtime that costs nothing. The calibrated model
can drop each of those assumptions in turn: the predicted speed-up of pp over mp is computed with the
stages as split, then with each measured cost added on top of the ones before, until it is the full
prediction. Each step's change is what that cost takes from the ideal, PREDICTED (it comes from the
calibration, not from timing pp with the cost removed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from bench.predict.costs import CostSource, cost_model, predict_step
from bench.predict.scenario import Scenario
from strategies.cost_model import BlockCosts, RuntimeOverheads
from strategies.model_parallel import ModelParallelStrategy
from strategies.schedules import ideal_speedup


@dataclass(frozen=True)
class GapStep:
    """The predicted speed-up once ``added`` (and every step before it) is counted."""

    added: str
    predicted_speedup: float
    pp_ms: float | None = None
    mp_ms: float | None = None
    """Each side's PREDICTED step with those costs counted (None for the ideal): the last step's against the
    measured steps says which side the account misses on."""


class _Partial:
    """A cost source with some of its measured costs left out (counted as free)."""

    def __init__(self, source: CostSource, *, update: bool, slowdown: bool, transfers: bool, runtime: bool) -> None:
        self.source, self.update, self.slowdown, self.transfers, self.runtime = (
            source, update, slowdown, transfers, runtime)

    def blocks(self, threads: int) -> Sequence[BlockCosts]:
        return self.source.blocks(threads)

    def optimizer_ms(self, threads: int, parameters: float) -> float:
        return self.source.optimizer_ms(threads, parameters) if self.update else 0.0

    def overhead_ms(self, threads: int, samples: float) -> float:
        return self.source.overhead_ms(threads, samples) if self.update else 0.0

    def copy_ms(self, threads: int, size: float) -> float:
        return self.source.copy_ms(threads, size)

    def slowdown_for(self, processes: float) -> float:
        return self.source.slowdown_for(processes) if self.slowdown else 1.0

    def action_slowdown(self, processes: float) -> float:
        return self.source.action_slowdown(processes) if self.slowdown else 1.0

    def collective_ms(self, operation: str, size: float, ranks: int, stride: int = 1) -> float:
        return self.source.collective_ms(operation, size, ranks, stride) if self.transfers else 0.0

    def transfer_ms(self, size: float, sender: int, receiver: int, processes: int = 2) -> float:
        return self.source.transfer_ms(size, sender, receiver, processes) if self.transfers else 0.0

    def runtime_for(self, ranks: int, global_batch: float | None = None) -> RuntimeOverheads:
        return self.source.runtime_for(ranks, global_batch) if self.runtime else RuntimeOverheads()

    def residual_across_ranks(self, term: str, samples: float) -> float | None:
        return self.source.residual_across_ranks(term, samples) if self.runtime else 0.0

    def overlap_for(self, ranks: int) -> float:
        return self.source.overlap_for(ranks)


def pipeline_gap(source: CostSource, pp: Scenario, mp: Scenario) -> list[GapStep]:
    """From the ideal to the full prediction of pp's speed-up over mp (same stages, same micro-batches),
    one measured cost added per step. ``mp.threads`` may differ from pp's (the fidelity comparison runs
    mp on one pp rank's threads)."""
    steps = [GapStep(f"nothing: the ideal p·m/(m+p-1), p={pp.devices}, m={pp.microbatches}",
                     ideal_speedup(pp.devices, pp.microbatches))]
    added = {"update": False, "slowdown": False, "transfers": False, "runtime": False}
    runtime = source.runtime_for(pp.devices, pp.global_batch)
    terms: list[str] = []
    for side in (pp, mp):  # each side's own term where measured (mp's at its threads: model_parallel.threads_term)
        model = cost_model(side.strategy)
        if model.residual:
            own = model.fitted_terms(side)[0]
            terms.append(own if own is not None and own in runtime else model.residual)
    labels = {
        "stages": "the stages as split (their calibrated forward and backward times)",
        "update": "the optimizer step and the step's own overhead (not pipelined)",
        "slowdown": f"{pp.devices} processes computing at once (shared cores: x{source.slowdown_for(pp.devices):.3f})",
        "transfers": "the activations and gradients sent between stages",
        "runtime": "the runtimes: " + ", ".join(f"{term} {runtime[term]:.2f} ms" for term in terms),
    }
    for name in labels:
        if name in added:
            added[name] = True
        partial = _Partial(source, **added)
        pp_ms, mp_ms = predict_step(partial, pp, 1).step_ms, predict_step(partial, mp, 1).step_ms
        steps.append(GapStep(labels[name], mp_ms / pp_ms, pp_ms, mp_ms))
    return steps


def mp_twin(pp: Scenario, threads: int | None) -> Scenario:
    """``mp`` on the same stages and micro-batches as ``pp``, in one process with ``threads`` threads."""
    return dataclasses.replace(pp, strategy=ModelParallelStrategy.name, threads=threads)
