"""Parallelism strategies, registered by short name, each built from the option groups it reads."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from strategies.options import OptionGroup

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


REFERENCE = SingleDevice.name
"""The strategy every other is proven against and measured beside (``is_reference``)."""

PLUGINS_VARIABLE = "BENCH_STRATEGY_MODULES"
"""Comma-separated modules whose ``STRATEGIES`` (a tuple of Strategy classes) join the registry when this package
is imported: a strategy of one's own, in one module, reaches every command and every process a run starts
(torchrun's workers inherit the variable). docs/strategies.md: "Adding a strategy"."""


def register(cls: type[Strategy]) -> type[Strategy]:
    """Adds ``cls`` to the registry under ``cls.name``; a name already taken is a ConfigError."""
    if STRATEGIES.get(cls.name, cls) is not cls:
        raise ConfigError(f"strategy name {cls.name!r} is taken by {STRATEGIES[cls.name].__qualname__}")
    STRATEGIES[cls.name] = cls
    return cls


def load_plugins(modules: str | None = None) -> list[type[Strategy]]:
    """Registers the strategies of each module in ``modules`` (default: ``$BENCH_STRATEGY_MODULES``)."""
    found: list[type[Strategy]] = []
    for module in filter(None, (m.strip() for m in (modules or os.environ.get(PLUGINS_VARIABLE, "")).split(","))):
        found += [register(cls) for cls in importlib.import_module(module).STRATEGIES]
    return found


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
    reads: tuple[type[OptionGroup], ...] = cls.reads
    groups: dict[str, object] = {group.key: options.group(group) for group in reads}
    return cls(options.group(RunOptions), **groups)


load_plugins()

__all__ = ["PLUGINS_VARIABLE", "REFERENCE", "STRATEGIES", "ConfigError", "Launch", "Strategy", "Topology",
           "build_strategy", "load_plugins", "readers", "register", "strategy_class"]
