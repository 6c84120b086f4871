"""Plain scripts deliberately off by a factor of the work, for the fidelity checks to be seen failing."""

from __future__ import annotations

from bench.experiments.baselines.plain_ddp import plain_ddp_step_times


def plain_ddp_double_work(model: str, preset: str, batch_size: int, steps: int, warmup: int, seed: int,
                          device: str) -> list[float]:
    """The DDP tutorial's script on twice the global batch (module-level: the ranks unpickle it)."""
    return plain_ddp_step_times(model, preset, 2 * batch_size, steps, warmup, seed, device)
