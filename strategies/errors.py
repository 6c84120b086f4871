"""The one error a configuration can raise before any process starts."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot run; the message is the one line the user sees."""
