"""bench/predict/compute.py: the blocks' timings and the plain step's."""

from __future__ import annotations

import pytest

import models


def test_blocks_are_timed_only_at_batches_the_model_trains_on(caplog: pytest.LogCaptureFixture) -> None:
    # The cnn's last BatchNorm sees one value per channel at batch 1 and refuses to train: a sweep of 32
    # samples over 4 devices x 8 micro-batches asked the calibration for that batch, and the whole sweep died.
    import functools

    import torch

    from bench.predict.compute import compute_costs, timed_batches

    make = functools.partial(models.build_model, "cnn", "tiny", "batch")
    costs = compute_costs(make, [1, 2, 4], lambda params: torch.optim.SGD(params, lr=0.01), torch.device("cpu"), 1)
    assert "not timed at batch 1" in caplog.text
    # the lines run through batches 2 and 4 only (batch 1 is read off them)
    assert {tuple(n for n, _ in block.forward_ms.points) for block in costs.blocks} == {(2.0, 4.0)}
    assert timed_batches(costs) == [2, 4]  # what calibrate asks of the next thread count: one warning, not one each
    with pytest.raises(ValueError, match="trains at none of the batches calibration times \\(1\\)"):
        compute_costs(make, [1], lambda params: torch.optim.SGD(params, lr=0.01), torch.device("cpu"), 1)


def test_a_plain_step_whose_repeats_stray_far_is_timed_again_and_the_steadiest_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    # A main job's calibration timed the small mlp's plain step at batch 16 while other work held the cores: its
    # repeats strayed 328% and their median sat 16 ms above its blocks'; mp, whose micro-batch that was, came out
    # +164%. Taken once, the first try below would be kept, its median 60 ms.
    import statistics

    from bench.predict.compute import STEP_SPREAD_LIMIT, STEP_TRIES, half_range, steady_step_ms

    disturbed, quiet = [10.0, 11.0, 60.0, 70.0, 80.0], [10.0, 10.5, 11.0, 10.2, 10.1]
    assert half_range(disturbed) > STEP_SPREAD_LIMIT >= half_range(quiet)
    tries = iter([disturbed, quiet])
    kept = steady_step_ms(None, 16, None, None, 5, timed=lambda *args: next(tries))  # type: ignore[arg-type]
    assert statistics.median(kept) == pytest.approx(10.2) and "strayed 58% over its repeats (try 1 of 3)" in caplog.text
    # never quiet: every try timed, the one that strays least kept, and said so
    always = iter([disturbed, [10.0, 10.0, 25.0, 30.0, 36.0], disturbed])  # the second strays 52%
    calls = []

    def wild(*args: object) -> list[float]:
        calls.append(args)
        return next(always)

    kept = steady_step_ms(None, 16, None, None, 5, timed=wild)  # type: ignore[arg-type]
    assert len(calls) == STEP_TRIES and kept == [10.0, 10.0, 25.0, 30.0, 36.0]
    assert "in every try; its steadiest is kept" in caplog.text
