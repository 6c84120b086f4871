"""Where the time goes: torch.profiler traces of a few timed steps (reports/traces.py writes pipeline
timelines in the same Chrome trace-event JSON, which Perfetto, https://ui.perfetto.dev, and TensorBoard's
profiler plugin open). ``--profile DIR`` profiles the last ``PROFILED_STEPS`` timed steps
of each rank (``DIR/<run>/rank<r>.trace.json``); the profiler's overhead then sits in those steps, so
the record says ``profiled`` and the report leaves such runs out of its comparisons.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from bench.harness.labels import file_name

PROFILED_STEPS = 3


def profile_path(folder: str, run: str, rank: int) -> Path:
    """``folder/<run>/rank<r>.trace.json`` (``run``: the run's label, made a folder name)."""
    return Path(folder) / file_name(run) / f"rank{rank}.trace.json"


def step_profiler(path: Path | None, first_step: int, steps: int, cuda: bool) -> AbstractContextManager:
    """A torch.profiler that records steps ``first_step .. first_step + steps - 1`` (call ``.step()`` after
    each step) and writes their trace to ``path``; nothing at all without a path."""
    if path is None:
        return nullcontext()
    path.parent.mkdir(parents=True, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=first_step, warmup=0, active=steps, repeat=1),
        on_trace_ready=lambda profiler: profiler.export_chrome_trace(str(path)),
        record_shapes=False,
    )
