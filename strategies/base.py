"""The Strategy interface: how a run is launched, where the model lives, and what one step does.

One interface covers every shape a strategy takes:

    launch         processes          devices per process    examples
    IN_PROCESS     1                  1..N                   single, dp (nn.DataParallel), mp (layers split)
    PER_DEVICE     N (torchrun)       1                      ddp, pp (one stage per rank), hybrid (dp x pp)

The runner (bench/runner.py) calls the methods in this order on every process:

    validate -> setup -> prepare -> [shard_batch -> train_step] x steps -> teardown
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from models.spec import ModelSpec

if TYPE_CHECKING:  # the config names strategies; strategies only read it
    from bench.config import RunConfig


class Launch(enum.Enum):
    """How many processes a strategy needs."""

    IN_PROCESS = "in-process"
    """One process drives all of the run's devices."""
    PER_DEVICE = "per-device"
    """One process per device, started by torchrun (the suite starts it, or the user does)."""


@dataclass(frozen=True)
class Topology:
    """Where this process sits in the run and which devices it drives. Passed, never global."""

    devices: tuple[torch.device, ...]
    """The devices this process drives (several for IN_PROCESS multi-device strategies)."""
    rank: int = 0
    """Global rank of this process."""
    world_size: int = 1
    """Number of processes in the run."""
    local_rank: int = 0
    """Rank on this node; picks the GPU under torchrun."""
    emulated: bool = False
    """True when several 'devices' share one CPU: timings then say nothing about GPU scaling."""

    @property
    def device_count(self) -> int:
        """Devices used by the whole run (the N of scaling plots)."""
        return len(self.devices) * self.world_size

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


class ConfigError(ValueError):
    """A configuration that cannot run; the message is the one line the user sees."""


class Strategy(ABC):
    """A parallelism strategy. Subclasses override ``prepare`` and, where they must, the rest.

    The defaults describe one process training a whole model on ``topo.devices[0]``.
    """

    name: str
    """Short registry name (``single``, ``ddp``, ...)."""
    launch: Launch = Launch.IN_PROCESS
    """IN_PROCESS strategies run inside the ``bench`` process; PER_DEVICE ones under torchrun."""
    description: str = ""
    """One line for ``python -m bench list``."""
    sweep_options: tuple[str, ...] = ()
    """RunConfig fields this strategy reads that a sweep may vary (``microbatches``, ``schedule``)."""
    min_devices: int = 1
    """The fewest devices that make the strategy what it is (a pipeline has 2 stages); sweeps plan no fewer."""
    max_devices: int | None = None
    """The most devices the strategy can use (1 for ``single``); sweeps plan no larger point."""
    compile_refusal: str | None = None
    """Why ``--compile`` cannot work with this strategy, in a few words; None where it can."""
    needs_gpus: bool = False
    """True where the CPU can only fake the strategy (nn.DataParallel): sweeps skip it without GPUs."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        """The resolved run configuration (defaults filled in, already validated by bench.config)."""
        from strategies.precision import Precision  # precision.py imports ConfigError from here

        self.precision = Precision(config.precision, "cuda" if config.accelerator == "cuda" else "cpu")
        """How the step's arithmetic runs: autocast for bf16/fp16, fp16's gradient scaler."""

    def validate(self, gpus_available: int) -> None:
        """Raises ConfigError for a configuration this strategy cannot run. Called before any
        process starts, so every check that needs only numbers belongs here.

        The default admits one device, the shape of the baseline."""
        if self.config.devices != 1:
            raise ConfigError(f"strategy {self.name!r} runs on exactly 1 device, got --devices {self.config.devices}")

    def setup(self, topo: Topology) -> None:  # noqa: B027
        """Creates process groups and other per-run state. Default: nothing to set up."""

    def teardown(self) -> None:  # noqa: B027
        """Releases what ``setup`` created; called even when a step raised."""

    def local_topology(self) -> Topology:
        """The topology of an IN_PROCESS run: this process drives ``config.devices`` devices.

        A strategy that cannot use the devices asked for (nn.DataParallel on a CPU) overrides
        this, so that the record counts the devices that really worked."""
        emulated = self.config.accelerator == "cpu" and self.config.devices > 1
        return Topology(devices=devices_for(self.config.accelerator, self.config.devices), emulated=emulated)

    @abstractmethod
    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        """Places, wraps or splits the model; returns the module the optimizer trains."""

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's part of the global batch, on the devices that consume it."""
        device = topo.devices[0]
        return inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)

    def train_step(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> torch.Tensor | None:
        """One optimizer step. Returns this process's mean loss, or None where this process
        computes no loss (a pipeline's first stages)."""
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(self.precision.forward(model, inputs), targets)
        self.precision.backward(loss)
        self.precision.step(optimizer)
        return loss.detach()

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The strategy-free state of this process's part of the model (no wrapper prefixes),
        keyed like ``ModelSpec.blocks.state_dict()``."""
        return model.state_dict()

    def rank_fields(self) -> dict[str, object]:
        """What this process measured beyond step times (a stage's busy time, say). Every rank's
        dict reaches ``record_fields`` on the reporting rank. Must be picklable."""
        return {}

    def record_fields(self, per_rank: list[dict[str, object]]) -> dict[str, object]:
        """Strategy-specific knobs and figures for the record's ``strategy_fields``, from every
        rank's ``rank_fields`` (in rank order). Default: rank 0's."""
        return dict(per_rank[0]) if per_rank else {}


def devices_for(accelerator: str, count: int, first: int = 0) -> tuple[torch.device, ...]:
    """``count`` devices of one kind: ``cuda:first..`` on GPUs, ``count`` times the CPU otherwise."""
    if accelerator == "cuda":
        return tuple(torch.device("cuda", first + i) for i in range(count))
    return tuple(torch.device("cpu") for _ in range(count))
