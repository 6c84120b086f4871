"""The Strategy interface: how a run is launched, where the model lives, and what one step does.

One interface covers every shape a strategy takes:

    launch         processes          devices per process    examples
    IN_PROCESS     1                  1..N                   single, dp (nn.DataParallel), mp (layers split)
    PER_DEVICE     N (torchrun)       1                      ddp, pp (one stage per rank), hybrid (dp x pp)

A strategy is built from the option groups it reads (strategies/options.py) and keeps no state
of a run: what it builds lives on the module ``prepare`` returns, which stands in for the model.
The runner (bench/harness/runner.py) calls, on every process, inside the process group it owns for
PER_DEVICE strategies:

    validate (before any process starts) -> prepare -> [shard_batch -> train_step] x steps
        -> rank_fields -> (reporting rank) record_fields
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.cost_model import CostModel
from strategies.devices import devices_for, is_emulated
from strategies.errors import ConfigError
from strategies.options import ModelFacts, RunOptions
from strategies.precision import Precision


@dataclass(frozen=True)
class OptimizerChoice:
    """The optimizer the run asked for, before a strategy decides how it holds its state."""

    cls: type[torch.optim.Optimizer]
    """torch.optim.SGD, torch.optim.Adam, ..."""
    kwargs: dict[str, Any]
    """Its hyper-parameters (lr, momentum)."""

    def build(self, params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
        # tp (and hybrid's tp without FSDP) leave some parameters plain beside their DTensors; CUDA's
        # default foreach step raises on a list that mixes the two, so each kind is a group of its own.
        return self.cls(groups_by_kind(params), **self.kwargs)


def groups_by_kind(params: Iterable[torch.Tensor]) -> list[dict[str, Any]]:
    """``params`` as parameter groups of one kind each, plain tensors first, then DTensors (empty
    groups left out), so that a foreach optimizer step never sees the two kinds in one list."""
    from torch.distributed.tensor import DTensor

    plain: list[torch.Tensor] = []
    distributed: list[torch.Tensor] = []
    for param in params:
        (distributed if isinstance(param, DTensor) else plain).append(param)
    return [{"params": group} for group in (plain, distributed) if group]


@dataclass(frozen=True)
class VerifyCheck:
    """One more configuration ``bench verify`` proves a strategy on, beside the one at its smallest size."""

    devices: int
    options: dict[str, int]
    """The options given on its command line beyond the strategy and device count (mesh degrees, micro-batches)."""
    models: tuple[str, ...] = ()
    """The model families it is checked on (others get a skipped row saying so); empty: every family."""


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


class Strategy(ABC):
    """A parallelism strategy. Subclasses override ``prepare`` and, where they must, the rest.

    The defaults describe one process training a whole model on ``topo.devices[0]``.
    """

    name: ClassVar[str]
    """Short registry name (``single``, ``ddp``, ...)."""
    launch: ClassVar[Launch] = Launch.IN_PROCESS
    """IN_PROCESS strategies run inside the ``bench`` process; PER_DEVICE ones under torchrun."""
    description: ClassVar[str] = ""
    """One line for ``python -m bench list``."""
    reads: ClassVar[tuple[type, ...]] = ()
    """Option groups this strategy reads beyond RunOptions; each reaches ``__init__`` as a keyword
    argument named by the group's ``key``. Flags of any other group are refused for it."""
    min_devices: ClassVar[int] = 1
    """The fewest devices that make the strategy what it is (a pipeline has 2 stages); sweeps plan no fewer."""
    max_devices: ClassVar[int | None] = None
    """The most devices the strategy can use (1 for ``single``); sweeps plan no larger point."""
    compile_refusal: ClassVar[str | None] = None
    """Why ``--compile`` cannot work with this strategy, in a few words; None where it can."""
    fp16_refusal: ClassVar[str | None] = None
    """Why ``--precision fp16`` cannot work with this strategy (after "--precision fp16 "); None where it can."""
    memory_tracking_refusal: ClassVar[str | None] = None
    """Why torch's MemTracker cannot follow this strategy's step (its memory by kind is then not recorded)."""
    is_reference: ClassVar[bool] = False
    """The strategy every other is checked against (``single``): reports call it the reference."""
    splits_the_batch: ClassVar[bool] = False
    """Each device sees its own part of the global batch (data parallelism), so BatchNorm's statistics differ
    from one device's by construction; micro-batches split it too, whatever the strategy."""
    needs_gpus: ClassVar[bool] = False
    """True where the CPU can only fake the strategy (nn.DataParallel): sweeps skip it without GPUs."""
    cost_model: ClassVar[CostModel | None] = None
    """How its step and memory compose from calibrated compute and collectives (strategies/cost_model.py),
    for bench predict, calibrate and plan; None: measured, never predicted."""
    verify_checks: ClassVar[tuple[VerifyCheck, ...]] = ()
    """What ``bench verify`` proves beyond the run at ``max(--devices, min_devices)`` with the defaults."""
    min_mesh_dims: ClassVar[int] = 1
    """For a strategy that reads ``MeshOptions``: the fewest mesh dimensions beyond degree 1 that make it
    more than another registered strategy (bench plan weighs no mesh below)."""

    def __init__(self, run: RunOptions) -> None:
        self.run = run
        """The devices, batch and precision (resolved: defaults filled in, already validated)."""
        self.precision = Precision(run.precision, "cuda" if run.accelerator == "cuda" else "cpu")
        """How the step's arithmetic runs: autocast for bf16/fp16, fp16's gradient scaler."""

    def memory_refusal(self) -> str | None:
        """Why torch's MemTracker cannot follow this run's step, or None (default: the class's refusal)."""
        return self.memory_tracking_refusal

    def validate(self, facts: ModelFacts) -> None:
        """Raises ConfigError for a configuration this strategy cannot run. Called before any
        process starts, so every check that needs only numbers belongs here.

        The default admits one device, the shape of the baseline."""
        if self.run.devices != 1:
            raise ConfigError(f"strategy {self.name!r} runs on exactly 1 device, got --devices {self.run.devices}")

    def local_topology(self) -> Topology:
        """The topology of an IN_PROCESS run: this process drives ``config.devices`` devices.

        A strategy that cannot use the devices asked for (nn.DataParallel on a CPU) overrides
        this, so that the record counts the devices that really worked."""
        run = self.run
        devices = devices_for(run.accelerator, run.devices)
        return Topology(devices=devices, emulated=is_emulated(run.accelerator, run.devices))

    @abstractmethod
    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        """Places, wraps or splits the model; returns the module the optimizer trains."""

    def make_optimizer(self, model: nn.Module, choice: OptimizerChoice) -> torch.optim.Optimizer:
        """The optimizer over ``model``'s parameters (ZeRO-1 shards its state instead)."""
        return choice.build(model.parameters())

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's part of the global batch, on the devices that consume it."""
        # A copy, on the CPU too: a slice of the global batch would hold the whole batch's storage, which no
        # device holds (MemTracker counted the whole batch on every emulated rank)
        device = topo.devices[0]
        return inputs.to(device, non_blocking=True, copy=True), targets.to(device, non_blocking=True, copy=True)

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

    def rank_fields(self, model: nn.Module, topo: Topology) -> Any:
        """What this process measured beyond step times (a stage's timings, say), or None. Every
        rank's reaches ``record_fields`` on the reporting rank, so it must be picklable."""
        return None

    def record_fields(self, model: nn.Module, per_rank: Sequence[Any]) -> dict[str, Any]:
        """Strategy-specific knobs and figures for the record's ``strategy_fields``, from every
        rank's ``rank_fields`` (in rank order). Default: none."""
        return {}
