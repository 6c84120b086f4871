"""What N processes of this machine cost beyond their compute, as ``bench calibrate`` measured it on N of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.predict.curves import Curve
from strategies.cost_model import RuntimeOverheads


@dataclass(frozen=True)
class Communication:
    """What N processes of this machine cost beyond their compute, measured on N of them: on shared CPU
    cores a collective among 4 processes is not a 2-process one with more bytes (the processes queue for
    the cores), so each device count a sweep runs is measured as itself."""

    collectives: dict[str, Curve]
    """all_reduce, all_gather, reduce_scatter, broadcast, send_recv."""
    runtime: RuntimeOverheads = field(default_factory=RuntimeOverheads)
    """Each cost model's ``residual`` term (strategies/cost_model.py), measured by bench/predict/runtime.py."""
    overlap: float = 1.0
    """The share of a collective that hides behind compute running at the same time (1: all of it, as on
    GPUs' separate streams; on a CPU the collective's threads want the cores the compute holds)."""
    spread: float = 0.0
    """Half the range of the reference runs' steps over the groups, over their median (median over the runs)."""
    runtime_batch: int = 0
    """The global batch of the reference runs ``runtime`` was fitted on."""
    runtime_per_sample: RuntimeOverheads = field(default_factory=RuntimeOverheads)
    """Each residual term's change per sample of global batch: the line through the reference runs at two
    batches (bench/predict/runtime.py); empty where they ran at one, the terms then the same at every batch."""
    runtime_last_batch: int = 0
    """The larger reference batch: beyond the two, a term stays at the nearer one's value."""

    def runtime_at(self, global_batch: float | None) -> RuntimeOverheads:
        """The residual terms on the line through the reference runs, at ``global_batch`` (None: at theirs),
        held at the nearer reference batch's beyond them: the line's slope is the difference of two measured
        terms over a few dozen samples, and carried on past them it took a tiny mlp's predicted step below zero
        at half the smaller reference batch."""
        if global_batch is None or not self.runtime_per_sample:
            return self.runtime
        within = min(max(global_batch, self.runtime_batch), self.runtime_last_batch or global_batch)
        terms = {*self.runtime, *self.runtime_per_sample}
        return RuntimeOverheads({term: self.runtime[term] + self.runtime_per_sample[term] *
                                 (within - self.runtime_batch) for term in terms})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Communication:
        curves = {name: Curve([(int(size), float(ms)) for size, ms in c["points"]])
                  for name, c in data["collectives"].items()}
        return cls(curves, RuntimeOverheads(**data["runtime"]), float(data["overlap"]), float(data.get("spread", 0.0)),
                   int(data.get("runtime_batch", 0)), RuntimeOverheads(**data.get("runtime_per_sample", {})),
                   int(data.get("runtime_last_batch", 0)))
