"""bench/predict/collectives.py: the collectives' curves and reference steps, measured over groups of processes."""

from __future__ import annotations

import pytest


def test_collectives_and_reference_steps_are_the_median_over_groups_of_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of processes keeps its placement on the cores for its whole life: one badly placed group must
    set neither a collective's curve nor a runtime's residual."""
    import os

    import torch

    from bench.predict import collectives

    groups = iter([({"all_reduce": [(4096, 5.5), (16384, 6.0)]}, {"tp": 30.0, "overlap": 1.0}),
                   ({"all_reduce": [(4096, 0.5), (16384, 0.9)]}, {"tp": 16.0, "overlap": 0.1}),
                   ({"all_reduce": [(4096, 0.6), (16384, 0.7)]}, {"tp": 17.0, "overlap": 0.2})])

    def one_group(target: object, args: tuple, nprocs: int) -> None:  # what rank 0 of a group leaves behind
        torch.save(next(groups), os.path.join(args[1], "collectives.pt"))

    monkeypatch.setattr(collectives, "start_ranks", one_group)
    curves, steps = collectives.measure_collectives(2, "cpu", [4096, 16384], groups=3)
    assert curves["all_reduce"].points == [(4096, 0.6), (16384, 0.9)]
    # and the calibration's own spread: half tp's range over the groups, over its median
    assert steps == {"tp": 17.0, "overlap": 0.2, "spread": pytest.approx((30.0 - 16.0) / 2 / 17.0)}


def test_small_messages_are_timed_several_to_a_repeat() -> None:
    """One operation alone after the barrier also times how late each rank left it."""
    from bench.predict.collectives import KIB, _operations_per_repeat

    assert [_operations_per_repeat(size) for size in (4 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB, 256 * KIB * KIB)] \
        == [16, 16, 4, 1, 1]


def test_an_all_gather_is_timed_only_up_to_a_shard_of_the_largest_message() -> None:
    """Its size is each rank's shard: the largest message (the whole gradient) over the ranks is the most it sends."""
    from bench.predict.collectives import KIB, default_sizes, operation_sizes

    sizes = default_sizes(64 * KIB * KIB)
    assert operation_sizes("all_reduce", sizes, 2) == sizes
    assert max(operation_sizes("all_gather", sizes, 2)) == 16 * KIB * KIB  # the last within 32 MiB
    assert max(operation_sizes("all_gather", sizes, 4)) == 16 * KIB * KIB
    assert operation_sizes("all_gather", [4 * KIB, 16 * KIB], 8) == [4 * KIB, 16 * KIB]  # a curve needs two
