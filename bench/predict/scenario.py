"""What of a run's configuration a prediction depends on: the ``Scenario`` the cost models price.

Below the cost models (bench/predict/costs.py), the predict command (bench/predict/cli.py) and the
calibration's reference runs (bench/predict/runtime.py), which each turn configurations into scenarios."""

from __future__ import annotations

from dataclasses import dataclass

import models
from bench.config import RunConfig
from strategies.mesh import MeshLayout


@dataclass(frozen=True)
class Scenario:
    """The configuration a prediction is for (the options ``bench run`` takes that change its cost)."""

    strategy: str
    devices: int
    global_batch: int
    microbatches: int = 1
    schedule: str = "gpipe"
    stages_per_rank: int = 1
    balance: str = "even"
    bucket_cap_mb: float = 25.0
    reshard_after_forward: bool = True
    dp: int | None = None
    pp: int | None = None
    tp_blocks: tuple[int, ...] = ()
    """tp: the blocks its plan shards, each with one all-reduce pair per row-wise layer (``tp_pairs``)
    and ``tp_layers`` layers the plan parallelizes."""
    tp_pairs: tuple[int, ...] = ()
    tp_layers: tuple[int, ...] = ()
    threads: int | None = None
    """The threads each process computes with; None: what the launcher gives it (bench/launch.py)."""


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
