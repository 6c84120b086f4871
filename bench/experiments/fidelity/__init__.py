"""``bench fidelity``: how far to trust the numbers, measured side by side.

Each comparison alternates its two sides round by round in one process or group of processes
(A B, B A, A B, ...), so that drift in the machine's speed falls on both sides alike, and holds
the figure it measures to a target. Each result is also a record (``kind`` ``fidelity``) that
``bench report`` turns into its "How far to trust these numbers" section.

- ``results``: the setup, the result protocol, the alternation and the record every comparison shares.
- ``loops``: ``single``, ``ddp`` and ``fsdp`` against the PyTorch tutorials' hand-written loops.
- ``pipeline``: ``pp``'s speed-up over ``mp`` against the ideal (with the calibrated model's
  account of the gap), run side by side with pp's bubble, which ``bubble`` holds to the theory.
"""

from __future__ import annotations

from bench.experiments.fidelity.bubble import BubbleCheck
from bench.experiments.fidelity.loops import (
    Comparison,
    ddp_fidelity_config,
    ddp_vs_plain_ddp,
    fsdp_fidelity_config,
    fsdp_vs_plain_fsdp,
    single_vs_plain_loop,
)
from bench.experiments.fidelity.pipeline import PipelineSpeedup, pipeline_config, pp_vs_mp
from bench.experiments.fidelity.results import FidelityResult, Setup, fidelity_record

__all__ = [
    "BubbleCheck",
    "Comparison",
    "FidelityResult",
    "PipelineSpeedup",
    "Setup",
    "ddp_fidelity_config",
    "ddp_vs_plain_ddp",
    "fidelity_record",
    "fsdp_fidelity_config",
    "fsdp_vs_plain_fsdp",
    "pipeline_config",
    "pp_vs_mp",
    "single_vs_plain_loop",
]
