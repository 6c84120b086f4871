"""strategies/cost_model.py: the arithmetic every cost model shares: passes over blocks, hidden communication, bytes."""

from __future__ import annotations

import os

import pytest

from bench.predict.calibration import BlockCost, Line
from strategies.cost_model import (
    CostModel,
    RuntimeOverheads,
    Scenario,
    partly_hidden,
    split_pass,
    threads_per_process,
    whole_pass,
)


def _block(forward: float, backward: float, split: tuple[float, float] | None = None) -> BlockCost:
    """A block whose passes take these ms per sample (its I and W too, where ``split`` gives them)."""
    input_grad, weight_grad = (Line(0.0, split[0]), Line(0.0, split[1])) if split else (None, None)
    return BlockCost(Line(0.0, forward), Line(0.0, backward), 0, 0.0, 0.0, backward_input_ms=input_grad,
                     backward_weight_ms=weight_grad)


BLOCKS = [_block(1.0, 2.0, (0.5, 1.5)), _block(10.0, 20.0, (5.0, 15.0)), _block(100.0, 200.0)]


def test_a_pass_sums_the_blocks_it_names_and_a_split_needs_every_block_measured() -> None:
    assert whole_pass(BLOCKS, range(3), 2) == (222.0, 444.0)  # type: ignore[arg-type]
    assert whole_pass(BLOCKS, [0, 2], 1) == (101.0, 202.0)  # type: ignore[arg-type]
    assert split_pass(BLOCKS, [0, 1], 2) == (11.0, 33.0)  # type: ignore[arg-type]
    assert split_pass(BLOCKS, [1, 2], 2) is None  # type: ignore[arg-type]


def test_communication_hides_behind_compute_only_by_the_overlap() -> None:
    assert partly_hidden(1.0, 5.0, 1.0) == 1.0  # all that can hide does
    assert partly_hidden(1.0, 5.0, 0.0) == 5.0  # none does: all of it is waited for
    assert partly_hidden(1.0, 5.0, 0.75) == 2.0
    assert partly_hidden(3.0, 2.0, 0.0) == 3.0  # never less than what was exposed anyway


def test_a_runtime_term_not_measured_is_zero_and_the_defaults_of_a_cost_model() -> None:
    overheads = RuntimeOverheads({"ddp_per_step": 1.5})
    assert (overheads["ddp_per_step"], overheads["pp_per_action"]) == (1.5, 0.0)
    model = CostModel()
    scenario = Scenario("single", 1, 8)
    assert model.runtime_units(scenario, 5) == 1 and model.reference_options(2, 4) is None
    model.residual = "single_per_step"
    assert model.reference_options(2, 4) == {}
    with pytest.raises(NotImplementedError):
        model.step(None, scenario, 1)  # type: ignore[arg-type]


def test_processes_share_the_cores_and_each_keeps_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [threads_per_process(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert threads_per_process(1) == 1
