"""``single``: the whole model on one device. The reference every other strategy must match."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import (
    FP32,
    BlockCosts,
    CostModel,
    CostSource,
    Scenario,
    StepPrediction,
    threads_per_process,
    whole_pass,
)
from strategies.step_memory import BlockHeld, at_largest_moment, by_kind


class WholeModelCost(CostModel):
    """One process computes every block, one after another, for each of its passes (``microbatches``: mp's
    stages take turns, as its devices do), then the update. In-process strategies keep every core."""

    def passes(self, scenario: Scenario) -> int:
        return 1

    def per_pass_residual(self, costs: CostSource, scenario: Scenario) -> float:
        """What each pass pays beyond its blocks: the strategy's own runtime (none for a plain step; mp's hand-over
        between stages, strategies/model_parallel.py)."""
        return 0.0

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        threads = scenario.threads or threads_per_process(1)
        blocks = costs.blocks(threads)
        passes = self.passes(scenario)
        samples = scenario.global_batch / passes
        forward, backward = whole_pass(blocks, range(len(blocks)), samples)
        # Each pass pays (or gains) what a whole pass did beyond its blocks in the calibration's plain steps,
        # plus the strategy's own runtime per pass (mp's hand-over between stages).
        per_pass = self.per_pass_residual(costs, scenario)
        compute = (forward + backward + costs.overhead_ms(threads, samples) + per_pass) * passes
        update = costs.optimizer_ms(threads, sum(b.parameters for b in blocks))
        return StepPrediction(compute + update, compute, 0.0, update)

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        parameters = sum(b.parameters for b in blocks)
        saved = sum(b.saved_bytes_per_sample for b in blocks)
        held = [BlockHeld(FP32 * b.parameters, b.saved_bytes_per_sample * scenario.global_batch,
                          b.output_bytes_per_sample * scenario.global_batch) for b in blocks]
        kinds = by_kind(parameters, parameters, states * parameters, saved * scenario.global_batch)
        return at_largest_moment(kinds, held, scenario.backward_peaks, scenario.global_batch, gathered_bytes)


class SingleDevice(Strategy):
    """Plain training on one device: the baseline of every speed-up and every equivalence check."""

    name = "single"
    is_reference = True
    launch = Launch.IN_PROCESS
    description = "whole model on one device (the reference)"
    max_devices = 1
    cost_model = WholeModelCost()

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return spec.blocks.to(topo.devices[0])
