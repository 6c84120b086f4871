"""bench/predict/explain.py: the account of why a pipeline falls short of the ideal."""

from __future__ import annotations

import dataclasses

import pytest

from bench.predict.communication import Communication
from bench.predict.costs import predict_step
from bench.predict.scenario import Scenario
from strategies.cost_model import RuntimeOverheads
from tests.helpers.calibrations import FREE, equal_blocks


def test_the_pipeline_gap_starts_at_the_ideal_and_ends_at_the_full_prediction() -> None:
    from bench.predict.explain import mp_twin, pipeline_gap

    pp = Scenario("pp", 2, 32, microbatches=4)
    free = pipeline_gap(equal_blocks(2), pp, mp_twin(pp, None))
    # Equal stages, nothing else measured: every step is the ideal 2 * 4 / (4 + 2 - 1).
    assert [s.predicted_speedup for s in free] == pytest.approx([1.6] * 6)
    costly = dataclasses.replace(equal_blocks(2), slowdown={2: 1.25}, communication={
        2: Communication(FREE, RuntimeOverheads(pp_per_action=0.5))})
    steps = [s.predicted_speedup for s in pipeline_gap(costly, pp, mp_twin(pp, None))]
    assert steps[1] == steps[2] == pytest.approx(1.6)  # equal stages, no update: nothing lost yet
    # Two processes computing at once run 1.25x slower, one alone does not: the pipeline's actions in the
    # fill and drain run alone, so it loses less than 1.25x; mp, in one process, loses nothing.
    assert 1.6 / 1.25 < steps[3] < 1.6
    assert steps[4] == pytest.approx(steps[3])  # free transfers
    assert steps[5] < steps[4]  # 0.5 ms per action
    full = predict_step(costly, mp_twin(pp, None), 1).step_ms / predict_step(costly, pp, 1).step_ms
    assert steps[5] == pytest.approx(full)
    # Three equal blocks on two stages: the longer stage sets the pace, below the ideal from the first cost.
    uneven = [s.predicted_speedup for s in pipeline_gap(equal_blocks(3), pp, mp_twin(pp, None))]
    assert 1 < uneven[1] < uneven[0]
