"""bench/harness/frozen_heap.py: a process forked from the suite's fork server collects only what it made."""

from __future__ import annotations

import gc

import pytest

from bench.harness.ranks import PRELOADED, in_forked_process


def _frozen_and_tracked() -> tuple[int, int]:
    """The objects out of the collector's reach, and those a collection would walk."""
    return gc.get_freeze_count(), len(gc.get_objects())


@pytest.mark.launches
def test_what_the_fork_server_imported_is_frozen_before_it_forks() -> None:
    assert PRELOADED[-1] == "bench.harness.frozen_heap"  # after torch and the suite, whatever else it imports
    frozen, tracked = in_forked_process(_frozen_and_tracked)
    # torch and the suite are hundreds of thousands of objects; a server that froze nothing gives 0 here
    assert frozen > 100_000 and tracked < frozen / 10, (frozen, tracked)
