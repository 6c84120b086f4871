"""Parallelism strategies, registered by short name."""

from __future__ import annotations

from strategies.base import ConfigError, Launch, Strategy, Topology
from strategies.single import SingleDevice

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (SingleDevice,)}


def get_strategy(name: str) -> Strategy:
    """A fresh strategy object by name; an unknown name lists the valid ones."""
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


__all__ = ["STRATEGIES", "ConfigError", "Launch", "Strategy", "Topology", "get_strategy"]
