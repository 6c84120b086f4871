"""``dp``: nn.DataParallel, one process driving N GPUs.

Every step, nn.DataParallel cuts the batch with ``Tensor.chunk(N)`` (strategies/shards.py),
copies the module to each GPU that got a chunk, runs the replicas in threads and gathers the
outputs on the first GPU, where the loss, the summed gradients and the optimizer live.
``python -m bench explain dp`` prints that step by step.

Without GPUs nn.DataParallel keeps no device list and just calls the module, so on a CPU
this strategy is a one-device pass-through, and its topology and record say so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import CostSource, Scenario, StepPrediction
from strategies.options import ModelFacts, OptionSource, RunOptions
from strategies.precision import AutocastModule
from strategies.shards import chunk_sizes
from strategies.single import WholeModelCost

log = logging.getLogger(__name__)


def flatten_rnn_weights(model: nn.Module) -> int:
    """Has every RNN call ``flatten_parameters()`` before its forward; returns how many RNNs.

    Replicas get their weights by broadcast, as separate tensors, and cuDNN then warns that
    "RNN module weights are not part of single contiguous chunk of memory" and compacts them
    on every call. The hook runs on each replica (replicas share the hooks dict) and packs its
    weights first, the fix the PyTorch FAQ gives. Off CUDA, ``flatten_parameters`` does nothing.
    """
    rnns = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    for rnn in rnns:
        rnn.register_forward_pre_hook(_flatten)
    return len(rnns)


def _flatten(module: nn.RNNBase, args: tuple[object, ...]) -> None:
    module.flatten_parameters()


def apply_data_parallel(model: nn.Module, devices: tuple[torch.device, ...]) -> nn.DataParallel:
    """``nn.DataParallel`` over ``devices``: the CUDA ones by index, or none (a pass-through) on a CPU."""
    flatten_rnn_weights(model)
    if devices[0].type == "cuda":
        ids = [d.index for d in devices]
        return nn.DataParallel(model.to(devices[0]), device_ids=ids, output_device=ids[0])
    return nn.DataParallel(model)


class PassThroughCost(WholeModelCost):
    """nn.DataParallel on a CPU hands the whole batch to its one device: single's step. On GPUs its scatter,
    replicas and gather per step have no model here."""

    def specialise(self, scenario: Scenario, options: OptionSource, model: str, preset: str, norm: str) -> Scenario:
        if options.group(RunOptions).accelerator == "cuda":
            raise ValueError("no cost model for nn.DataParallel on GPUs (its scatter, replicas and gather per step)")
        return scenario

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        step = super().step(costs, scenario, states)
        step.notes.append("dp on the CPU is a pass-through to one device: predicted as single")
        return step


class DataParallelStrategy(Strategy):
    """nn.DataParallel: the batch scattered over N GPUs of one process, as in the PyTorch tutorial."""

    name = "dp"
    launch = Launch.IN_PROCESS
    description = "nn.DataParallel: one process, the batch scattered over N GPUs"
    needs_gpus = True  # on a CPU it can only pass through
    cost_model = PassThroughCost()
    splits_the_batch = True
    memory_tracking_refusal = "torch's MemTracker is not known to follow nn.DataParallel's replica threads"
    compile_refusal = (
        "nn.DataParallel copies the module into replicas every step, and each copy would call the original's "
        "compiled code; use ddp"
    )

    def __init__(self, run: RunOptions) -> None:
        super().__init__(run)
        self._replicas: int | None = None
        """Fewest replicas that got work in any step (nn.DataParallel skips devices that get no chunk)."""

    def validate(self, facts: ModelFacts) -> None:
        pass  # any number of devices; without GPUs a pass-through, which the sweep skips and records

    def local_topology(self) -> Topology:
        if self.run.accelerator == "cuda":
            return super().local_topology()
        # One CPU, one module call per step: never report N devices for what ran on one. Still
        # "emulated", because it stands in for N GPUs.
        return Topology(devices=(torch.device("cpu"),), emulated=True)

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        requested, batch = self.run.devices, self.run.global_batch
        chunks = chunk_sizes(batch, requested)
        if len(chunks) < requested:
            log.warning(
                "nn.DataParallel cuts a batch of %d into %s: only %d of %d devices get work",
                batch, "/".join(map(str, chunks)), len(chunks), requested,
            )
        if topo.devices[0].type != "cuda" and requested > 1:
            log.warning(
                "no GPUs: nn.DataParallel calls the module once on the whole batch, so this run "
                "stands in for %d devices on 1 (recorded as effective_device_count 1)",
                requested,
            )
        # bf16/fp16: autocast inside the replicated module, where nn.DataParallel's threads see it.
        module = AutocastModule(spec.blocks, self.precision) if self.precision.autocasts else spec.blocks
        return apply_data_parallel(module, topo.devices)

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # The whole batch goes to the first device; nn.DataParallel scatters it from there.
        replicas = len(chunk_sizes(len(inputs), len(topo.devices)))
        self._replicas = replicas if self._replicas is None else min(self._replicas, replicas)
        return super().shard_batch(inputs, targets, topo)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        # Unwrapped, so that the keys carry no "module." and load into any strategy's model.
        assert isinstance(model, nn.DataParallel)
        inner = model.module
        return (inner.module if isinstance(inner, AutocastModule) else inner).state_dict()

    def rank_fields(self, model: nn.Module, topo: Topology) -> DataParallelFields:
        return DataParallelFields(
            requested_devices=self.run.devices,
            effective_device_count=self._replicas or 0,
            pass_through=self.run.accelerator != "cuda",
            scatter_chunk_sizes=chunk_sizes(self.run.global_batch, self.run.devices),
        )

    def record_fields(self, model: nn.Module, per_rank: Sequence[DataParallelFields]) -> dict[str, Any]:
        return dataclasses.asdict(per_rank[0])


@dataclass(frozen=True)
class DataParallelFields:
    """What nn.DataParallel did with the devices it was given."""

    requested_devices: int
    effective_device_count: int
    pass_through: bool
    """No GPUs: one module call on the whole batch."""
    scatter_chunk_sizes: list[int]
