"""Fault injection for the reliability tests: ``BENCH_FAULT=rank:step:action[:once]``.

    raise   the rank raises RuntimeError at that step (a Python error in a step)
    exit    the rank's process exits at once with code 17 (a crash: no exception, no clean-up)
    stall   the rank sleeps forever (a hang: its peers wait in a collective until the timeout)
    oom     the rank raises torch.OutOfMemoryError (out of memory, simulated on any device)

``:once`` fails only the first attempt of a torchrun launch (TORCHELASTIC_RESTART_COUNT 0),
so that ``--max-restarts`` can be shown to recover.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

FAULT_VARIABLE = "BENCH_FAULT"
ACTIONS = ("raise", "exit", "stall", "oom")


@dataclass(frozen=True)
class Fault:
    step: int
    action: str

    def trigger(self, rank: int) -> None:
        message = f"{FAULT_VARIABLE}: rank {rank} fails at step {self.step} as asked"
        if self.action == "exit":
            os._exit(17)
        if self.action == "stall":
            time.sleep(10**6)
        if self.action == "oom":
            raise torch.OutOfMemoryError(f"{message} (simulated out of memory)")
        raise RuntimeError(message)


def fault_for(rank: int) -> Fault | None:
    """This rank's fault, if ``BENCH_FAULT`` names it (read once, before the clock starts)."""
    spec = os.environ.get(FAULT_VARIABLE)
    if not spec:
        return None
    fault_rank, step, action, *once = spec.split(":")
    if action not in ACTIONS:
        raise ValueError(f"{FAULT_VARIABLE}={spec}: unknown action {action!r}; choose from {', '.join(ACTIONS)}")
    if once and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return None
    return Fault(int(step), action) if int(fault_rank) == rank else None
