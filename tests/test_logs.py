"""bench/harness/logs.py: every log line names the rank that wrote it, at the level asked for."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest

from bench.harness.logs import configure_logging


@contextlib.contextmanager
def bare_root() -> Iterator[logging.Logger]:
    """The root logger with no handler, as in a fresh process (basicConfig acts only then; pytest's own
    handlers are on it while a test runs), put back as it was after."""
    root, matplotlib = logging.getLogger(), logging.getLogger("matplotlib")
    handlers, level, matplotlib_level = root.handlers[:], root.level, matplotlib.level
    root.handlers.clear()
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        matplotlib.setLevel(matplotlib_level)


def _line(root: logging.Logger) -> str:
    (handler,) = root.handlers
    assert handler.formatter is not None
    record = logging.LogRecord("bench.sweep", logging.INFO, __file__, 1, "step %d", (3,), None)
    return handler.formatter.format(record).split(" ", 1)[1]  # after the time


@pytest.mark.parametrize(("rank", "verbose", "line", "level"), [
    ("1", False, "[rank 1] INFO bench.sweep: step 3", logging.INFO),
    (None, True, "INFO bench.sweep: step 3", logging.DEBUG),
])
def test_a_line_names_its_rank_under_torchrun_and_none_outside(
    rank: str | None, verbose: bool, line: str, level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    with bare_root() as root:
        configure_logging(verbose=verbose)
        assert _line(root) == line
        assert root.level == level
        assert logging.getLogger("matplotlib").level == logging.WARNING  # its axis-unit guesses stay out
