"""``tp``: tensor parallelism (``torch.distributed.tensor.parallel``), one process per device.

Every rank sees the whole batch and holds a slice of the sharded Linear layers, paired as
Megatron-LM pairs them (the model family's ``TensorParallelPlan`` names them):

    x (whole, every rank) -> colwise W1[:, slice r] -> act -> rowwise W2[slice r, :] -> partial y_r
                                                                     all-reduce: y = sum_r y_r

    one all-reduce per pair in the forward, and one in the backward (for dL/dx of the colwise input)

What the plan does not name stays replicated: every rank computes it on the same data and gets the
same gradient, so it needs no communication either. The optimizer steps each rank's slices (DTensors)
and its replicated copies (plain tensors) alike; N ranks train like one device (tests/test_sharded.py).

The two kinds go to the optimizer as two parameter groups: on CUDA torch defaults to the foreach
step, which runs one kernel over a group's whole list and raises on a list that mixes Tensor and
DTensor ("aten._foreach_add_.List got mixed torch.Tensor and DTensor"). Within a group of one kind
foreach stays on, so nothing is given up for it (tests/test_tensor_parallel.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from models.spec import COLWISE, ROWWISE, ModelSpec, TensorParallelPlan
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import (
    FP32,
    BlockCosts,
    CostModel,
    CostSource,
    Scenario,
    StepPrediction,
    own_overhead,
    threads_per_process,
)
from strategies.distributed import backend
from strategies.errors import ConfigError
from strategies.fsdp import full_state
from strategies.options import ModelFacts, OptionSource, RunOptions
from strategies.step_memory import BlockHeld, at_largest_moment, by_kind

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def plan_refusal(plan: TensorParallelPlan | None, layer_types: Sequence[str], who: str = "strategy 'tp'") -> str | None:
    """Why ``who`` cannot run a model tensor-parallel (no plan: the layer types no rule shards), or None."""
    if plan is not None:
        return None
    layers = ", ".join(layer_types) or "its layers"
    return (f"{who} needs a tensor-parallel plan and this model has none: no sharding rule for {layers} "
            "(the mlp and transformer families have plans)")


def apply_tp(blocks: nn.Sequential, plan: TensorParallelPlan, device: torch.device) -> nn.Module:
    """Shards the Linear layers ``plan`` names over all ranks (the process group must exist)."""
    from torch.distributed.device_mesh import init_device_mesh

    blocks = blocks.to(device)
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    return parallelize_blocks(blocks, plan.styles, mesh)


def parallelize_blocks(blocks: nn.Module, styles: dict[str, str], mesh: DeviceMesh) -> nn.Module:
    """Shards the Linear layers that ``styles`` names (paths inside ``blocks``) over the 1-D ``mesh``, in place."""
    from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

    plan: dict[str, ParallelStyle] = {path: ColwiseParallel() if style == COLWISE else RowwiseParallel()
                                      for path, style in styles.items()}
    return parallelize_module(blocks, mesh, plan)


@functools.lru_cache(maxsize=32)
def _plan_shape(model: str, preset: str, norm: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                                             tuple[float, ...]]:
    """The blocks the model's tp plan splits, each one's row-wise (all-reduce) layers and all its planned
    layers, and per block of the model the share of its saved bytes the plan splits. Once per model a
    process: bench plan specialises thousands of candidates of one model."""
    import models
    from models.sizes import saved_bytes_per_sample, tp_split_saved_bytes_per_sample

    with torch.device("meta"):
        spec = models.build_model(model, preset, norm)
    styles = spec.tp_plan.styles if spec.tp_plan else {}
    block_of = {path: int(path.split(".")[0]) for path in styles}
    blocks = sorted(set(block_of.values()))
    pairs = tuple(sum(block_of[p] == b and style == ROWWISE for p, style in styles.items()) for b in blocks)
    layers = tuple(sum(block_of[p] == b for p in styles) for b in blocks)
    shares: tuple[float, ...] = ()
    if styles:
        split, whole = tp_split_saved_bytes_per_sample(spec, styles), saved_bytes_per_sample(spec)
        shares = tuple(part / total if total else 0.0 for part, total in zip(split, whole, strict=True))
    return tuple(blocks), pairs, layers, shares


class TensorParallelCost(CostModel):
    """The sharded blocks' compute divided by the degree; each column/row pair's all-reduce forward and
    backward on the critical path (every rank sees the whole batch)."""

    residual = "tp_per_layer"
    """Per layer the plan parallelizes: DTensor's dispatch and redistribution around each, forward and backward."""

    def specialise(self, scenario: Scenario, options: OptionSource, model: str, preset: str, norm: str) -> Scenario:
        blocks, pairs, layers, shares = _plan_shape(model, preset, norm)
        return dataclasses.replace(scenario, tp_blocks=blocks, tp_pairs=pairs, tp_layers=layers,
                                   tp_split_share=shares)

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        return sum(scenario.tp_layers)

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        n = scenario.devices
        threads = threads_per_process(n)
        blocks, slow = costs.blocks(threads), costs.slowdown_for(n)
        samples = scenario.global_batch
        compute = comm = 0.0
        pairs = dict(zip(scenario.tp_blocks, scenario.tp_pairs, strict=True))
        for i, block in enumerate(blocks):
            share = 1 / n if i in pairs else 1.0
            compute += (block.forward_ms.at(samples) + block.backward_ms.at(samples)) * share * slow
            # One all-reduce of the block's output forward and one of its input gradient backward, per pair.
            comm += 2 * pairs.get(i, 0) * costs.collective_ms("all_reduce", block.output_bytes_per_sample * samples, n)
        compute += own_overhead(costs, threads, samples) * slow
        comm += costs.runtime_for(n, scenario.global_batch)[self.residual] * sum(scenario.tp_layers)
        update = costs.optimizer_ms(threads, self._local_parameters(blocks, scenario)) * slow
        return StepPrediction(compute + comm + update, compute, comm, update)

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        local = self._local_parameters(blocks, scenario)
        # Every rank keeps the activations its plan leaves whole and its share of those the plan splits
        # (measured on the small transformer: 50 MiB on 2 ranks, 38 on 4, where the whole batch's are 74).
        shares = scenario.tp_split_share or (0.0,) * len(blocks)
        kept = [b.saved_bytes_per_sample * (1 - share * (1 - 1 / scenario.devices))
                for b, share in zip(blocks, shares, strict=True)]
        batch = scenario.global_batch
        # each block's output is whole on every rank (the row-wise layer's all-reduce makes it so)
        ranks = [scenario.devices if i in scenario.tp_blocks else 1 for i in range(len(blocks))]
        held = [BlockHeld(FP32 * b.parameters / r, saved * batch, b.output_bytes_per_sample * batch)
                for b, saved, r in zip(blocks, kept, ranks, strict=True)]
        return at_largest_moment(by_kind(local, local, states * local, sum(kept) * batch), held)

    @staticmethod
    def _local_parameters(blocks: Sequence[BlockCosts], scenario: Scenario) -> float:
        sharded = sum(blocks[i].parameters for i in scenario.tp_blocks)
        return sum(b.parameters for b in blocks) - sharded * (1 - 1 / scenario.devices)


class TensorParallelStrategy(Strategy):
    """Tensor parallel: column-then-row-wise Linear pairs sharded over the ranks, the batch whole on each."""

    name = "tp"
    cost_model = TensorParallelCost()
    min_devices = 2
    launch = Launch.PER_DEVICE
    description = "tensor parallel (parallelize_module, column- then row-wise pairs): one process per device"

    def __init__(self, run: RunOptions) -> None:
        super().__init__(run)
        self.plan: TensorParallelPlan | None = None

    def validate(self, facts: ModelFacts) -> None:
        if (refusal := plan_refusal(facts.tp_plan, facts.layer_types)) is not None:
            raise ConfigError(refusal)
        assert facts.tp_plan is not None
        try:
            facts.tp_plan.check_degree(self.run.devices)
        except ValueError as exc:
            raise ConfigError(f"{exc} (--devices {self.run.devices})") from None

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        if spec.tp_plan is None:  # validate said so before any process started; a user's own torchrun did not
            raise ConfigError(plan_refusal(None, ()) or "")
        self.plan = spec.tp_plan
        return apply_tp(spec.blocks, spec.tp_plan, topo.devices[0])

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return full_state(model)

    def record_fields(self, model: nn.Module, per_rank: Sequence[object]) -> dict[str, Any]:
        return {"backend": backend(), "tp": self.run.devices,
                "sharded_layers": len(self.plan.styles) if self.plan else 0}
