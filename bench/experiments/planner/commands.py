"""The commands that run a planned configuration: ``python -m bench run`` on one machine, the torchrun line
every node runs, and a Slurm line that starts them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from bench.harness.config import RunConfig
from strategies import Launch, strategy_class

ALWAYS = ("strategy", "devices", "model", "preset", "batch_size")
"""Flags every command names, default or not, so that it reads as the configuration it runs."""
NEVER = ("out", "accelerator", "norm", "backend")
"""Left to the machine that runs it (the device kind) or to the user (where the record goes)."""


@dataclass(frozen=True)
class Commands:
    """How to run one configuration; ``torchrun`` and ``slurm`` only where it spans more than one node."""

    bench: str
    torchrun: str | None
    slurm: str | None


def run_flags(config: RunConfig) -> list[str]:
    """``bench run`` flags that rebuild ``config``: the essentials, then every setting not at its default."""
    default = RunConfig().as_dict()
    flags: list[str] = []
    for name, value in config.as_dict().items():
        if name in NEVER or (name not in ALWAYS and value == default[name]) or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        flags += ([flag] if value else ["--no-" + flag[2:]]) if isinstance(value, bool) else [flag, str(value)]
    return flags


def commands(config: RunConfig, gpus_per_node: int) -> Commands:
    """The command lines for ``config`` on nodes of ``gpus_per_node`` GPUs."""
    flags = shlex.join(run_flags(config))
    bench = f"python -m bench run {flags}"
    per_device = strategy_class(config.strategy).launch is Launch.PER_DEVICE
    if not per_device or config.run.devices <= gpus_per_node:
        return Commands(bench, None, None)
    nodes = -(-config.run.devices // gpus_per_node)
    rendezvous = f"--nproc-per-node {gpus_per_node} --rdzv-backend c10d --rdzv-endpoint \"$HEAD:29500\""
    torchrun = f"torchrun --nnodes {nodes} --node-rank \"$NODE_RANK\" {rendezvous} -m bench run {flags}"
    slurm = (f"srun --nodes {nodes} --ntasks-per-node 1 --gpus-per-node {gpus_per_node} "
             f"torchrun --nnodes {nodes} --node-rank \"$SLURM_NODEID\" {rendezvous} -m bench run {flags}")
    return Commands(bench, torchrun, slurm)
