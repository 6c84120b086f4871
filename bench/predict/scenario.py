"""What of a run's configuration a prediction depends on: the ``Scenario`` the cost models price.

Below both the predict command (bench/predict/cli.py) and the calibration's reference runs
(bench/predict/runtime.py), which each turn configurations into scenarios."""

from __future__ import annotations

import models
from bench.config import RunConfig
from bench.predict.costs import Scenario
from strategies.mesh import MeshLayout


def scenario_for(config: RunConfig) -> Scenario:
    """The cost-relevant options of a resolved run configuration."""
    import torch

    if config.strategy == "dp" and config.accelerator == "cuda":
        raise ValueError("no cost model for nn.DataParallel on GPUs (its scatter, replicas and gather per step)")
    blocks: list[int] = []
    pairs: list[int] = []
    layers: list[int] = []
    if config.strategy == "tp":
        with torch.device("meta"):
            plan = models.build_model(config.model, config.preset, config.norm).tp_plan
        styles = plan.styles if plan else {}
        rowwise = [int(path.split(".")[0]) for path, style in styles.items() if style == "rowwise"]
        blocks = sorted({int(path.split(".")[0]) for path in styles})
        pairs = [rowwise.count(b) for b in blocks]
        layers = [sum(int(path.split(".")[0]) == b for path in styles) for b in blocks]
    dp, pp = config.dp, config.pp
    if config.strategy == "hybrid":
        layout = MeshLayout.for_devices(config.devices, config.dp, config.pp, config.dp_shard, config.tp)
        if layout.dp_shard > 1 or layout.tp > 1:
            raise ValueError("no cost model for hybrid with --dp-shard or --tp yet (dp x pp only)")
        dp, pp = layout.dp, layout.pp
    return Scenario(config.strategy, config.devices, config.global_batch, config.microbatches, config.schedule,
                    config.stages_per_rank, config.balance, config.bucket_cap_mb, config.reshard_after_forward,
                    dp, pp, tuple(blocks), tuple(pairs), tuple(layers))
