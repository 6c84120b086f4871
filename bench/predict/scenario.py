"""A run's configuration as the ``Scenario`` its strategy's cost model prices (strategies/cost_model.py)."""

from __future__ import annotations

from bench.harness.config import RunConfig
from bench.predict.costs import cost_model
from strategies.cost_model import Scenario

__all__ = ["Scenario", "scenario_for"]


def scenario_for(config: RunConfig) -> Scenario:
    """The cost-relevant options of a resolved run configuration; ValueError where its strategy has no model
    for it."""
    common = Scenario(config.strategy, config.devices, config.global_batch, config.microbatches, config.schedule,
                      config.stages_per_rank, config.balance, config.bucket_cap_mb, config.reshard_after_forward,
                      config.dp, config.pp)
    return cost_model(config.strategy).specialise(common, config, config.model, config.preset, config.norm)
