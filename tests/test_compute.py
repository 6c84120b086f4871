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


def test_the_compute_timed_twice_keeps_each_blocks_quicker_timing_and_the_plain_step_as_measured() -> None:
    # A slow spell that took the second block at batch 8 in the first timing and the first block at batch 2 in the
    # second: each point keeps the quicker; the plain step keeps the quicker of its two, the overhead what it
    # spends beyond the merged blocks and the update.
    from bench.predict.calibration import BlockCost, ComputeCosts, Line
    from bench.predict.compute import plain_step_ms, quicker

    def costs(first: list[tuple[float, float]], second: list[tuple[float, float]], overhead: float) -> ComputeCosts:
        blocks = [BlockCost(Line.fit(f), Line.fit([(n, 2 * t) for n, t in f]), 10, 4.0, 4.0) for f in (first, second)]
        return ComputeCosts(blocks, 0.01, Line.fit([(2, overhead), (8, overhead)]))

    slow_later = costs([(2, 1.0), (8, 3.0)], [(2, 1.0), (8, 6.0)], 0.5)
    slow_first = costs([(2, 1.6), (8, 3.0)], [(2, 1.0), (8, 4.0)], 10.0)  # its plain steps slow throughout
    merged = quicker(slow_later, slow_first)
    assert merged.blocks[0].forward_ms.points == ((2, 1.0), (8, 3.0))
    assert merged.blocks[1].forward_ms.points == ((2, 1.0), (8, 4.0))
    assert merged.blocks[1].backward_ms.at(8) == pytest.approx(8.0)
    for n in (2, 8):
        measured = min(plain_step_ms(slow_later, n), plain_step_ms(slow_first, n))
        assert plain_step_ms(merged, n) == pytest.approx(measured)
    # the first timing's plain step at 8 (27.7 ms) over blocks 6 ms quicker (block 1's forward by 2, backward by 4)
    assert merged.step_overhead_ms.at(8) == pytest.approx(0.5 + 3 * (6.0 - 4.0))
    assert quicker(slow_later, slow_later) == slow_later


def test_blocks_that_sum_past_their_plain_step_beyond_its_spread_are_scaled_to_it_there_only() -> None:
    # The seventeenth target sweep's one-thread cnn: blocks summing 49.7 ms at 4 samples over a plain step of 39.2
    # less its update (overhead -10.5 ms, the step's spread 7.5%); at 8 samples 5% past it, inside the spread.
    from bench.predict.calibration import BlockCost, ComputeCosts, Line
    from bench.predict.compute import plain_step_ms, reconciled

    blocks = [BlockCost(Line.fit([(4, 10.0), (8, 14.0)]), Line.fit([(4, 14.85), (8, 26.0)]), 10, 4.0, 4.0,
                        backward_input_ms=Line.fit([(4, 7.0), (8, 13.0)])),
              BlockCost(Line.fit([(4, 10.0), (8, 10.0)]), Line.fit([(4, 14.85), (8, 20.0)]), 10, 4.0, 4.0)]
    costs = ComputeCosts(blocks, 0.01, Line.fit([(4, -10.5), (8, -3.5)]), spread=0.075)
    mended = reconciled(costs)
    scale = 39.2 / 49.7

    def times(line: Line | None) -> list[float]:
        assert line is not None
        return [ms for _, ms in line.points]

    assert times(mended.blocks[0].forward_ms) == pytest.approx([10.0 * scale, 14.0])
    assert times(mended.blocks[1].backward_ms) == pytest.approx([14.85 * scale, 20.0])
    assert times(mended.blocks[0].backward_input_ms) == pytest.approx([7.0 * scale, 13.0])
    assert mended.blocks[1].backward_weight_ms is None
    assert mended.step_overhead_ms.points == ((4, 0.0), (8, -3.5))
    for n in (4, 8):  # the plain step, what single predicts, as it was measured
        assert plain_step_ms(mended, n) == pytest.approx(plain_step_ms(costs, n))
    steady = ComputeCosts(blocks, 0.01, Line.fit([(4, -3.0), (8, 2.0)]), spread=0.075)
    assert reconciled(steady) == steady  # 6% past it at 4 samples: inside the step's spread
