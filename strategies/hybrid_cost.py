"""hybrid's cost model: pp's schedule replayed on each pipeline of the mesh, with the collectives and runtime
terms of its other dimensions (tp inside each action, FSDP's gathers and syncs, the replicas' averaging)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from strategies.cost_model import FP32, BlockCosts, CostSource, Scenario, whole_pass
from strategies.fsdp import ShardedCost
from strategies.mesh import MeshLayout
from strategies.options import MeshOptions, OptionSource
from strategies.pipeline_cost import PipelineCost
from strategies.tensor_parallel import TensorParallelCost


class HybridCost(PipelineCost):
    """Any mesh hybrid runs: pp's schedule replayed on each pipeline (one stage rank of it is a group of tp
    ranks; the batch is cut over the dp x dp_shard pipelines), with inside each action the stage's tp
    all-reduces (each column/row pair's, forward and backward, as tp's model) and its FSDP all-gathers (the
    stage's shard gathered for each forward and again for each backward: fully_shard reshards after
    forward); after the schedule, exposed, the gradients' sync: pure dp x pp averages each stage's gradients
    over the replicas, FSDP reduce-scatters them over dp_shard (then all-reduces the shard over dp, HSDP)."""

    residual = "hybrid_per_step"
    """Beyond pp's per action: the replicas' gradient averaging by hand (strategies/ddp.py's ReplicaAverager)
    and the two meshes' groups, per step (fitted on dp x pp; meshes with tp or FSDP take tp's per-layer
    and fsdp's per-block terms instead)."""
    idle_residual = None
    """Its residual is per step: pp's share of each action spent between the spans is pp's (fitted on pp's
    reference run); hybrid's own reference bubble, fitted into it, overwrote pp's idle term."""

    def specialise(self, scenario: Scenario, options: OptionSource, model: str, preset: str, norm: str) -> Scenario:
        mesh = options.group(MeshOptions)
        layout = MeshLayout.for_devices(scenario.devices, mesh.dp, mesh.pp, mesh.dp_shard, mesh.tp)
        scenario = dataclasses.replace(scenario, dp=layout.dp, pp=layout.pp, dp_shard=layout.dp_shard, tp=layout.tp)
        if layout.tp > 1:  # which blocks tp's plan splits, as tp's own model reads them
            scenario = TensorParallelCost().specialise(scenario, options, model, preset, norm)
        return scenario

    def replicas(self, scenario: Scenario) -> int:
        return (scenario.dp or 1) * (scenario.dp_shard or 1)

    def layout(self, scenario: Scenario) -> MeshLayout:
        """The mesh the runner lays out for ``scenario`` (its degrees as ``specialise`` resolved them)."""
        return MeshLayout.for_devices(scenario.devices, scenario.dp, scenario.pp, scenario.dp_shard, scenario.tp)

    def tensor_parallel(self, scenario: Scenario) -> int:
        return scenario.tp or 1

    def compute_share(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario,
                      samples: float) -> float:
        tp = self.tensor_parallel(scenario)
        whole = sum(whole_pass(blocks, ids, samples))
        if tp == 1 or whole <= 0:
            return 1.0
        split = sum(sum(whole_pass(blocks, [i], samples)) for i in ids if i in scenario.tp_blocks)
        return (whole - split * (1 - 1 / tp)) / whole

    def action_communication_ms(self, costs: CostSource, scenario: Scenario, blocks: Sequence[BlockCosts],
                                ids: Sequence[int], samples: float) -> tuple[float, float]:
        tp, shard = self.tensor_parallel(scenario), scenario.dp_shard or 1
        pairs = dict(zip(scenario.tp_blocks, scenario.tp_pairs, strict=True))
        tensor = sum(pairs.get(i, 0) * costs.collective_ms("all_reduce", blocks[i].output_bytes_per_sample * samples,
                                                           tp) for i in ids) if tp > 1 else 0.0
        shard_stride = (scenario.pp or 1) * tp  # a dp_shard group's ranks are its pipeline's and tp's apart
        gather = sum(costs.collective_ms("all_gather", self.local_parameters(blocks, [i], scenario) * FP32, shard,
                                         shard_stride) for i in ids) if shard > 1 else 0.0
        return tensor + gather, tensor + gather

    def runtime_per_step_ms(self, costs: CostSource, scenario: Scenario, ids: Sequence[int]) -> float:
        """tp's per-layer and fsdp's per-block terms for the rank's own layers and blocks, once a step, as tp's
        and fsdp's own models pay them: fitted on steps of one forward and one backward, they do not repeat
        per micro-batch. On the 2-core VM (small mlp, 4 ranks, 6 meshes re-predicted from one calibration)
        paid in every forward and backward they put dp_shard 2 x tp 2 63% above the measured step, dp_shard 2
        x pp 2 and pp 2 x tp 2 at 4 micro-batches 118% and 146%; paid half in each pass, 15%, 61% and 76%.
        fully_shard's hooks run wherever it wraps the blocks, replicas alone too (HSDP with one shard)."""
        runtime = costs.runtime_for(scenario.devices, scenario.global_batch)
        layers = dict(zip(scenario.tp_blocks, scenario.tp_layers, strict=True))
        return (runtime[TensorParallelCost.residual] * sum(layers.get(i, 0) for i in ids)
                + (runtime[ShardedCost.residual] * len(ids) if self.layout(scenario).fsdp_dims else 0.0))

    def local_parameters(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> float:
        tp, shard = self.tensor_parallel(scenario), scenario.dp_shard or 1
        return sum(blocks[i].parameters / (tp if i in scenario.tp_blocks else 1) for i in ids) / shard

    def gathered(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> dict[str, float]:
        shard = scenario.dp_shard or 1
        if shard == 1 or not ids:
            return {}
        # one block gathered at a time (fully_shard reshards after each block's forward and backward)
        return {"gathered_parameters": FP32 * max(self.local_parameters(blocks, [i], scenario) * shard for i in ids)}

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        return 1

    def reference_variants(self, ranks: int, microbatches: int) -> dict[str, dict[str, int | str]]:
        return {}

    def fitted_terms(self, scenario: Scenario) -> tuple[str | None, str | None]:
        return self.residual, None

    def reference_options(self, ranks: int, microbatches: int) -> dict[str, int] | None:
        if ranks < 4 or ranks % 2:  # 2 replicas of a pipeline of at least 2 stages
            return None
        return {"microbatches": microbatches, "dp": 2, "pp": ranks // 2}

    def averaging_ms(self, costs: CostSource, scenario: Scenario, stage_parameters: float, replicas: int) -> float:
        dp, shard = scenario.dp or 1, scenario.dp_shard or 1
        if replicas == 1:
            return 0.0
        tp, pp = self.tensor_parallel(scenario), scenario.pp or 1
        if shard == 1 and tp == 1:  # pure dp x pp: ReplicaAverager's all-reduce, each replica pp ranks apart
            return (costs.collective_ms("all_reduce", stage_parameters * FP32, replicas, pp)
                    + costs.runtime_for(scenario.devices, scenario.global_batch)[self.residual])
        # fully_shard: the stage's gradients reduce-scattered over the shards (stage_parameters is one
        # shard's), the shard then all-reduced over the replicas (HSDP)
        sync = (costs.collective_ms("reduce_scatter", stage_parameters * shard * FP32, shard, pp * tp)
                if shard > 1 else 0.0)
        if dp > 1:
            sync += costs.collective_ms("all_reduce", stage_parameters * FP32, dp, shard * pp * tp)
        return sync
