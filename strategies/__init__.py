"""Parallelism strategies, registered by short name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.data_parallel import DataParallelStrategy
from strategies.ddp import DistributedDataParallelStrategy
from strategies.hybrid import HybridStrategy
from strategies.model_parallel import ModelParallelStrategy
from strategies.pipeline import PipelineStrategy
from strategies.single import SingleDevice

if TYPE_CHECKING:
    from bench.config import RunConfig

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        SingleDevice,
        DataParallelStrategy,
        DistributedDataParallelStrategy,
        ModelParallelStrategy,
        PipelineStrategy,
        HybridStrategy,
    )
}


def get_strategy(config: RunConfig) -> Strategy:
    """The strategy ``config.strategy`` set up for ``config``; an unknown name lists the valid ones."""
    try:
        cls = STRATEGIES[config.strategy]
    except KeyError:
        raise ConfigError(f"unknown strategy {config.strategy!r}; choose from {', '.join(STRATEGIES)}") from None
    return cls(config)


__all__ = ["STRATEGIES", "ConfigError", "Launch", "Strategy", "Topology", "get_strategy"]
