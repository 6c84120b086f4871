"""A run's configuration as the ``Scenario`` its strategy's cost model prices (strategies/cost_model.py)."""

from __future__ import annotations

from bench.harness.config import RunConfig
from bench.predict.costs import cost_model
from strategies.cost_model import Scenario

__all__ = ["Scenario", "scenario_for"]


def scenario_for(config: RunConfig) -> Scenario:
    """The cost-relevant options of a resolved run configuration; ValueError where its strategy has no model
    for it."""
    run, pipeline, workload = config.run, config.pipeline, config.workload
    common = Scenario(config.strategy, run.devices, run.global_batch, config.split.microbatches, pipeline.schedule,
                      pipeline.stages_per_rank, config.split.balance, config.buckets.bucket_cap_mb,
                      config.fsdp.reshard_after_forward, config.mesh.dp, config.mesh.pp)
    return cost_model(config.strategy).specialise(common, config, workload.model, workload.preset, workload.norm)
