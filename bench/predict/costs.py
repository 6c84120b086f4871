"""Predicted step time and memory of a run: its strategy's own cost model (``Strategy.cost_model``, each
beside its strategy under strategies/) priced with the durations of a calibration or a hardware profile."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from strategies import STRATEGIES
from strategies.cost_model import FP32, BlockCosts, CostModel, CostSource, Scenario, StepPrediction

__all__ = ["CostSource", "StepPrediction", "cost_model", "optimizer_states", "predict_memory", "predict_step",
           "predicted_strategies"]


def cost_model(strategy: str) -> CostModel:
    """The cost model of ``strategy``; ValueError where it has none (or is not registered)."""
    cls = STRATEGIES.get(strategy)
    if cls is None or cls.cost_model is None:
        raise ValueError(f"no cost model for strategy {strategy!r}")
    return cls.cost_model


def predicted_strategies() -> list[str]:
    """The registered strategies with a cost model, in the registry's order."""
    return [name for name, cls in STRATEGIES.items() if cls.cost_model is not None]


def predict_step(costs: CostSource, scenario: Scenario, optimizer_states: int) -> StepPrediction:
    """The predicted step of ``scenario``; ValueError for a strategy or setting with no model here.

    A runtime residual fitted below zero takes back overhead the model counted (communication it took as
    exposed); it cannot take back the compute and the update, so the step is held at those. On the tiny mlp
    (steps of 0.3 ms) one calibration's one-process ddp reference ran 2 ms under its prediction at 4 samples,
    and ddp on one device came out at -0.5 ms."""
    step = cost_model(scenario.strategy).step(costs, scenario, optimizer_states)
    floor = step.compute_ms + step.update_ms
    if step.step_ms >= floor:
        return step
    return dataclasses.replace(step, step_ms=floor, exposed_comm_ms=0.0, notes=[
        *step.notes, f"held at its compute and update: its runtime residual took {floor - step.step_ms:.3g} ms more "
                     "than the communication counted"])


def predict_memory(blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
                   gathered_bytes: int = FP32) -> dict[str, int]:
    """{kind: bytes} on the device that holds the most, as bench/harness/memory.py measures them: fp32 state (4 bytes
    per parameter of each kind a device holds, divided as the strategy shards it) and activations (what each
    block's forward saves for backward, times the samples a device holds at once); ``gathered_bytes`` per
    parameter FSDP gathers (2 under bf16 mixed precision on a GPU profile: FSDP2's param_dtype)."""
    model = cost_model(scenario.strategy)
    kinds = model.memory(blocks, scenario, states, gathered_bytes)
    # The step's batch, held at every moment: the data's, outside every strategy's model
    batch = int(scenario.batch_bytes_per_sample * scenario.global_batch * model.batch_share(scenario))
    return {**kinds, "other": batch, "total": kinds["total"] + batch} if batch else kinds


def optimizer_states(optimizer: str) -> int:
    """Tensors of state per parameter: SGD with momentum keeps one, Adam two."""
    return 2 if optimizer == "adam" else 1
