"""Run the suite's own ``train`` on several gloo processes, as torchrun would, and collect each rank's result.

Each process gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK) and meets the others
through a file rendezvous in a temporary folder; the whole group is killed if it outlives
``timeout_s``, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from bench.harness.config import RunConfig
from bench.harness.ranks import become_rank, start_ranks


def run_ranks(config: RunConfig, world_size: int, folder: Path, timeout_s: float = 180) -> list:
    """``train(config, capture_state=True)`` on ``world_size`` processes; one RunResult per rank."""
    return run_ranks_sequence([config], world_size, folder, timeout_s)[0]


def merged_state(results: list) -> dict[str, torch.Tensor]:
    """The whole model's parameters from every rank's part (identical replicas agree; stages add up)."""
    state: dict[str, torch.Tensor] = {}
    for result in results:
        state.update(result.model_state)
    return state


def _sequence_main(rank: int, world_size: int, configs: list[RunConfig], folder: str) -> None:
    become_rank(rank, world_size, folder)
    torch.set_num_threads(1)
    from bench.harness.runner import train
    from strategies.base import Topology
    from strategies.distributed import destroy_process_group, init_process_group

    # One group for every config: a strategy that finds a group formed keeps it (as under the
    # fidelity benchmark), so N configs cost one spawn instead of N.
    init_process_group(Topology(devices=(torch.device("cpu"),), rank=rank, world_size=world_size), timeout_s=120)
    try:
        results = [train(config, capture_state=True) for config in configs]
    finally:
        destroy_process_group()
    torch.save(results, os.path.join(folder, f"rank{rank}.pt"))


def run_ranks_sequence(configs: list[RunConfig], world_size: int, folder: Path, timeout_s: float = 240) -> list[list]:
    """Like ``run_ranks`` for several configs in one process group: ``[config][rank]`` RunResults."""
    # From the fork server every group of the session shares (bench/harness/ranks.py): no import per rank.
    context = start_ranks(_sequence_main, (world_size, configs, str(folder)), world_size, join=False)
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{world_size} ranks did not finish within {timeout_s:.0f} s")
    per_rank = [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
    return [list(results) for results in zip(*per_rank, strict=True)]
