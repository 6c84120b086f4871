"""Parallelism strategies, registered by short name, each built from the option groups it reads."""

from __future__ import annotations

from strategies.base import Launch, Strategy, Topology
from strategies.data_parallel import DataParallelStrategy
from strategies.ddp import DistributedDataParallelStrategy
from strategies.errors import ConfigError
from strategies.fsdp import FSDPStrategy
from strategies.hybrid import HybridStrategy
from strategies.model_parallel import ModelParallelStrategy
from strategies.options import OptionSource, RunOptions
from strategies.pipeline import PipelineStrategy
from strategies.single import SingleDevice
from strategies.tensor_parallel import TensorParallelStrategy
from strategies.zero1 import ZeRO1Strategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        SingleDevice,
        DataParallelStrategy,
        DistributedDataParallelStrategy,
        ZeRO1Strategy,
        FSDPStrategy,
        TensorParallelStrategy,
        ModelParallelStrategy,
        PipelineStrategy,
        HybridStrategy,
    )
}


def strategy_class(name: str) -> type[Strategy]:
    """The strategy registered as ``name``; an unknown name lists the valid ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


def readers(group: type) -> list[str]:
    """The strategies that read option group ``group`` (every one reads RunOptions)."""
    return [name for name, cls in STRATEGIES.items() if group is RunOptions or group in cls.reads]


def build_strategy(name: str, options: OptionSource) -> Strategy:
    """Strategy ``name`` built from the option groups it reads, taken from ``options``."""
    cls = strategy_class(name)
    groups = {group.key: options.group(group) for group in cls.reads}
    return cls(options.group(RunOptions), **groups)


__all__ = ["STRATEGIES", "ConfigError", "Launch", "Strategy", "Topology", "build_strategy", "readers", "strategy_class"]
