"""The harness's own sections of a run's configuration: what is trained, how it is measured, the
training knobs and the checkpoints. The strategies' sections are in strategies/options.py; the
whole configuration, every section side by side, is ``RunConfig`` (bench/harness/config.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """What is trained: the model, its synthetic data and its optimizer."""

    key: ClassVar[str] = "workload"

    model: str = "cnn"
    """Model family (mlp, cnn, rnn, transformer) or your own package.module:function."""
    preset: str = "small"
    """Model size: tiny (tests), small (CPU), large (GPU)."""
    norm: str = "batch"
    """CNN normalisation: batch, or group (exact under batch splitting)."""
    seed: int = 0
    """Seed for the model's weights and the synthetic data."""
    optimizer: str = "sgd"
    """Optimizer: sgd (momentum 0.9) or adam."""
    lr: float = 0.01
    """Learning rate."""


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """How the run is timed and recorded, and how long a stalled one may take."""

    key: ClassVar[str] = "measure"

    steps: int = 10
    """Timed optimizer steps."""
    out: str = "results/results.jsonl"
    """JSON-lines file the run's record is appended to."""
    timeout_s: float = 300.0
    """Process-group timeout (s): a dead or stalled rank ends the run after this long."""
    max_restarts: int = 0
    """torchrun restarts after a failure (0 for benchmarks: a restart would be timed)."""
    scaling: str | None = None
    """Set by sweeps: weak keeps the per-device batch as devices grow, strong keeps the global batch."""
    repeat: int = 0
    """Set by sweeps: which repeat of its configuration this run is (each repeat is a fresh process)."""
    profile: str | None = None
    """Write a torch.profiler trace of the last 3 timed steps of each rank under this folder (open in Perfetto)."""
    peak_tflops: float | None = None
    """Peak TFLOP/s per device for MFU (default: the data sheet's for known GPUs at --precision; none on CPUs)."""
    memory_by_kind: bool = True
    """Track the first warm-up steps' memory by kind with torch's MemTracker (untimed; it slows every op)."""


@dataclass(frozen=True, kw_only=True)
class KnobOptions:
    """Training knobs every strategy takes and every record keeps (--precision is in RunOptions)."""

    key: ClassVar[str] = "knobs"

    deterministic: bool = False
    """Deterministic algorithms, TF32 off, seeds everywhere: bit-identical reruns, slower kernels."""
    channels_last: bool | None = None
    """NHWC memory format for image models (the cnn); default: on for CUDA, off for CPU."""
    compile: bool = False
    """torch.compile each block (every strategy but dp: its replicas would call the original's compiled code)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward: less memory for one more forward."""


@dataclass(frozen=True, kw_only=True)
class CheckpointOptions:
    """Where the run starts from and where its trained model goes."""

    key: ClassVar[str] = "checkpoint"

    save_checkpoint: str | None = None
    """Write the trained model here, strategy-free (loads under any strategy)."""
    load_checkpoint: str | None = None
    """Start from this checkpoint instead of the seed's initial weights (written under any strategy)."""


HARNESS_SECTIONS: tuple[type, ...] = (WorkloadOptions, MeasureOptions, KnobOptions, CheckpointOptions)
