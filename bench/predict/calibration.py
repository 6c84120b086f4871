"""What ``bench calibrate`` measured, as one typed value with its JSON form and the checks a reader needs.

A calibration belongs to one machine (host, device, torch) and one model at one preset; a prediction
from another's would be a guess presented as a prediction, so ``check_matches`` refuses it in one line.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.predict.communication import Communication
from bench.predict.curves import HeldLine, Line
from strategies import ConfigError
from strategies.cost_model import RuntimeOverheads, threads_per_process

CALIBRATION_VERSION = 5


@dataclass(frozen=True)
class BlockCost:
    """One block of the model: compute per batch size, what it holds and what leaves it."""

    forward_ms: Line
    backward_ms: Line
    parameters: int
    output_bytes_per_sample: float
    """The activation that crosses to the next block (a pipeline's transfer per sample)."""
    saved_bytes_per_sample: float
    """What its forward keeps for its backward (models/sizes.py)."""
    tensors: tuple[int, ...] = ()
    """Each parameter tensor's element count: what moves one tensor at a time (ZeRO-1's broadcasts).
    Empty: the block's parameters as one tensor."""
    backward_input_ms: Line | None = None
    """The backward split as zero-bubble schedules run it: the gradient of the block's input alone (I) ...
    None: not measured (a file from before, a roofline)."""
    backward_weight_ms: Line | None = None
    """... then the gradient of its weights (W)."""

    def tensor_sizes(self) -> tuple[int, ...]:
        return self.tensors or (self.parameters,)

    def backward_split(self) -> tuple[Line, Line] | None:
        if self.backward_input_ms is None or self.backward_weight_ms is None:
            return None
        return self.backward_input_ms, self.backward_weight_ms


@dataclass(frozen=True)
class ComputeCosts:
    """The model's compute at one thread count per process."""

    blocks: list[BlockCost]
    optimizer_ms_per_parameter: float
    """The optimizer step's time over the parameters it updated."""
    step_overhead_ms: Line = Line(0.0, 0.0)
    """What a whole training step costs beyond its blocks and its update (zeroing gradients, the
    autograd engine's start, Python), by samples: a plain loop's step less the parts timed alone."""
    copy_ms_per_byte: float = 0.0
    """A tensor copy's time per byte (memory bandwidth): DDP's buckets and FSDP's copy-in/out cost it."""
    spread: float = 0.0
    """Half the range of a plain step's repeats over their median, the largest over the batches (1 process)."""


@dataclass(frozen=True)
class Canary:
    """bench/predict/canary.py's step for one layout: a process of ``threads`` threads stepping ``batch`` samples
    of the calibrated model, and the quickest time it took."""

    threads: int
    batch: int
    ms: float


@dataclass(frozen=True)
class Calibration:
    """One machine and model, measured by ``bench calibrate``."""

    model: str
    preset: str
    norm: str
    precision: str
    accelerator: str
    backend: str
    machine: dict[str, object]
    """The identity a prediction is checked against: host, device names, torch."""
    threads: dict[int, ComputeCosts]
    """Per thread count measured (a CPU process's share of the cores changes its compute)."""
    communication: dict[int, Communication]
    """Per process count measured (none where the machine cannot host two ranks: one GPU)."""
    slowdown: dict[int, float] = field(default_factory=dict)
    """Per count of processes computing at once on this machine, how much slower each one's compute runs
    than alone (shared cores and memory bandwidth; 1.0 on separate GPUs)."""
    env: dict[str, object] = field(default_factory=dict)
    fitted_runs: tuple[str, ...] | None = None
    """The reference runs whose timings entered it (runtime.fitted_key); None: a file that predates them."""
    global_batch: int | None = None
    """The global batch it was calibrated for (a sweep's); None: a file that predates the field."""
    canaries: tuple[Canary, ...] = ()
    """bench/predict/canary.py's step at calibration, for every layout a run takes (a process's threads and the
    samples of each of its passes); empty: none timed."""
    across_ranks: dict[str, HeldLine] = field(default_factory=dict)
    """Residual terms the process count does not change (an in-process run's devices are labels), fitted over the
    reference runs of every count measured, by the samples of one of the term's units (``with_across_ranks``)."""
    reference_drift: dict[int, dict[int, float]] = field(default_factory=dict)
    """By rank count, the speed of its reference runs against the compute's, by threads per process (their
    canaries' ratio, bench/predict/reference_speed.py; above 1: slower); empty: not measured."""

    def canary_for(self, threads: int, batch: int) -> Canary | None:
        """The canary timed at calibration for a process of ``threads`` threads stepping ``batch`` samples."""
        return next((c for c in self.canaries if (c.threads, c.batch) == (threads, batch)), None)

    def blocks(self, threads: int) -> list[BlockCost]:
        return self.threads[self._nearest(threads)].blocks

    def overhead_ms(self, threads: int, samples: float) -> float:
        """A whole plain step less its blocks and update: below zero where whole passes ran faster
        than their blocks timed one by one."""
        return self.threads[self._nearest(threads)].step_overhead_ms.signed_at(samples)

    def copy_ms(self, threads: int, size: float) -> float:
        return self.threads[self._nearest(threads)].copy_ms_per_byte * size

    def optimizer_ms(self, threads: int, parameters: float) -> float:
        return self.threads[self._nearest(threads)].optimizer_ms_per_parameter * parameters

    def slowdown_for(self, processes: float) -> float:
        """The slowdown with this many processes computing at once (a mean may be fractional: a pipeline's
        ranks idle in its bubble): straight between the counts measured (one process: 1.0), and beyond
        the largest growing with the oversubscription (processes per core share)."""
        points = sorted({1: 1.0, **self.slowdown}.items())
        if processes <= 1:
            return 1.0
        largest, at_largest = points[-1]
        if processes >= largest:
            return at_largest * processes / largest
        i = next(i for i, (n, _) in enumerate(points) if n >= processes)
        (n0, s0), (n1, s1) = points[i - 1], points[i]
        return s0 + (s1 - s0) * (processes - n0) / (n1 - n0)

    def action_slowdown(self, processes: float) -> float:
        """``slowdown_for`` of a pipeline's action (a few ms) with ``processes`` ranks at work beside it. More of
        them than the cores take turns on them: each at the cores' slowdown times the oversubscription, where
        processes computing side by side for a second measured more (4 on the 2-core VM: 2.57 against 2.06 so,
        their working sets evicting each other slice by slice). The smaller of the two."""
        cores, measured = self.machine.get("cpu_cores"), self.slowdown_for(processes)
        if self.accelerator != "cpu" or not isinstance(cores, int) or processes <= cores:
            return measured
        return min(measured, self.slowdown_for(cores) * processes / cores)

    def collective_ms(self, operation: str, size: float, ranks: int, stride: int = 1) -> float:
        """``operation``'s ms on ``ranks`` processes, from the curve measured on that many, else on the
        nearest count measured: a ring moves 2(N-1)/N of the bytes per rank for all-reduce and (N-1)/N for
        the others, so the bytes are scaled by that share's ratio. KeyError where none was measured. Every
        rank here shares one host: ``stride`` changes nothing."""
        if ranks <= 1:
            return 0.0
        measured = self._nearest_ranks(ranks)
        factor = (ranks - 1) / ranks / ((measured - 1) / measured)
        return self.communication[measured].collectives[operation].at(size * factor)

    def transfer_ms(self, size: float, sender: int, receiver: int, processes: int = 2) -> float:
        """One point-to-point transfer: this machine's ranks all share one host, so the pair's ranks do not
        change the link; the curve measured between ranks 0 and 1 among as many processes as the run has (else the
        nearest count), as they share the cores: 1 MiB took 0.32 ms among 2 and 0.42 among 4 (cnn, 2-core VM)."""
        return self.communication[self._nearest_ranks(max(2, processes))].collectives["send_recv"].at(size)

    def runtime_for(self, ranks: int, global_batch: float | None = None) -> RuntimeOverheads:
        """The runtimes' residuals measured on ``ranks`` processes (else on the nearest count measured), on their
        line at ``global_batch``."""
        if ranks in self.communication:  # one process's own (ddp alone), or those ranks'
            return self.communication[ranks].runtime_at(global_batch)
        if not self._collective_ranks():
            return RuntimeOverheads()
        return self.communication[self._nearest_ranks(ranks)].runtime_at(global_batch)

    def residual_across_ranks(self, term: str, samples: float) -> float | None:
        """``term`` at ``samples`` a unit on its line through every process count's reference runs; None: none."""
        return self.across_ranks[term].at(samples) if term in self.across_ranks else None

    def with_across_ranks(self, term: str, units: int) -> Calibration:
        """This calibration with ``term`` (paid ``units`` times a reference step) fitted over the reference runs of
        every process count (each count's two batches, on its line), by the samples of a unit; unchanged where no
        count measured it."""
        points = [(batch / units, c.runtime_at(batch)[term]) for c in self.communication.values() if term in c.runtime
                  for batch in {c.runtime_batch, c.runtime_last_batch or c.runtime_batch}]
        if not points:
            return self
        return dataclasses.replace(self, across_ranks={**self.across_ranks, term: HeldLine.fit(points)})

    def spread_for(self, processes: int) -> float:
        """The calibration's own spread where ``processes`` run: the half-width of a prediction's interval."""
        if processes > 1 and self._collective_ranks():
            return self.communication[self._nearest_ranks(processes)].spread
        return self.threads[self._nearest(threads_per_process(processes))].spread

    def overlap_for(self, ranks: int) -> float:
        return self.communication[self._nearest_ranks(ranks)].overlap if self._collective_ranks() else 1.0

    def with_runtime(self, ranks: int, runtime: RuntimeOverheads, global_batch: int = 0) -> Calibration:
        """This calibration with ``runtime`` as the residuals on ``ranks`` processes (measured there, at
        ``global_batch``), the same at every batch."""
        measured = dataclasses.replace(self.communication[ranks], runtime=runtime, runtime_batch=global_batch,
                                       runtime_per_sample=RuntimeOverheads())
        return dataclasses.replace(self, communication={**self.communication, ranks: measured})

    def with_runtime_line(self, ranks: int, at_batch: dict[int, RuntimeOverheads]) -> Calibration:
        """This calibration with the residuals on ``ranks`` processes on the line through those fitted at two
        global batches (``at_batch``; at one, the same at every batch)."""
        (first, runtime), *rest = sorted(at_batch.items())
        line = self.with_runtime(ranks, runtime, first)
        if not rest:
            return line
        last, at_last = rest[-1]
        terms = {*runtime, *at_last}
        slope = RuntimeOverheads({term: (at_last[term] - runtime[term]) / (last - first) for term in terms})
        measured = dataclasses.replace(line.communication[ranks], runtime_per_sample=slope, runtime_last_batch=last)
        return dataclasses.replace(line, communication={**line.communication, ranks: measured})

    def _collective_ranks(self) -> list[int]:
        """The process counts the collectives were measured on (one process's entry holds only its runtimes)."""
        return [n for n in self.communication if n > 1]

    def _nearest_ranks(self, ranks: int) -> int:
        if not self._collective_ranks():
            raise KeyError("no collectives measured (one GPU cannot host two ranks)")
        return min(self._collective_ranks(), key=lambda n: (abs(n - ranks), -n))

    def _nearest(self, threads: int) -> int:
        return min(self.threads, key=lambda t: (abs(t - threads), t))

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["kind"], data["calibration_version"] = "calibration", CALIBRATION_VERSION
        return data

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Calibration:
        """Reads a file ``bench calibrate`` wrote; ConfigError (one line) for anything else."""
        try:
            data: Any = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read calibration {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("kind") != "calibration":
            raise ConfigError(f"{path} is not a calibration written by `bench calibrate`")
        if data.get("calibration_version") != CALIBRATION_VERSION:
            raise ConfigError(f"{path} is calibration version {data.get('calibration_version')}, this suite reads "
                              f"{CALIBRATION_VERSION}: calibrate again")
        try:
            threads = {int(t): ComputeCosts([_block(b) for b in v["blocks"]], float(v["optimizer_ms_per_parameter"]),
                                            Line.from_json(v["step_overhead_ms"]), float(v["copy_ms_per_byte"]),
                                            float(v.get("spread", 0.0)))
                       for t, v in data["threads"].items()}
            communication = {int(n): Communication.from_json(c) for n, c in data["communication"].items()}
            return cls(data["model"], data["preset"], data["norm"], data["precision"], data["accelerator"],
                       data["backend"], data["machine"], threads, communication,
                       {int(k): float(v) for k, v in data["slowdown"].items()}, data.get("env", {}),
                       tuple(data["fitted_runs"]) if data.get("fitted_runs") is not None else None,
                       int(data["global_batch"]) if data.get("global_batch") else None,
                       tuple(Canary(int(c["threads"]), int(c["batch"]), float(c["ms"]))
                             for c in data.get("canaries", ())),
                       {term: HeldLine(**line) for term, line in data.get("across_ranks", {}).items()},
                       {int(d): {int(t): float(v) for t, v in by.items()}
                        for d, by in data.get("reference_drift", {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: calibration lacks or garbles {exc}; calibrate again") from None

    def check_matches(self, machine: dict[str, object], model: str, preset: str) -> None:
        """ConfigError naming the difference when this calibration is of another machine, torch or model."""
        if (self.model, self.preset) != (model, preset):
            raise ConfigError(f"the calibration is of {self.model}/{self.preset}, not {model}/{preset}; run "
                              f"`bench calibrate --model {model} --preset {preset}`")
        for key, value in self.machine.items():
            if machine.get(key) != value:
                raise ConfigError(f"the calibration was taken with {key} {value!r}, this machine has "
                                  f"{machine.get(key)!r}; calibrate on this machine")


def _block(data: dict[str, Any]) -> BlockCost:
    split = [Line.from_json(data[k]) if data.get(k) else None for k in ("backward_input_ms", "backward_weight_ms")]
    return BlockCost(Line.from_json(data["forward_ms"]), Line.from_json(data["backward_ms"]), int(data["parameters"]),
                     float(data["output_bytes_per_sample"]), float(data["saved_bytes_per_sample"]),
                     tuple(int(n) for n in data["tensors"]), *split)
