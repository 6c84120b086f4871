"""Schedules' action tables and their simulation, as literal tables (strategies/action_tables.py)."""

from __future__ import annotations

import pytest

from strategies.action_tables import (
    Action,
    action_table,
    fill_drain_table,
    one_f_one_b_table,
    simulate,
    simulated_bubble,
    theoretical_bubble,
)
from strategies.schedules import BY_NAME, available_schedules, check_schedule, formula_bubble


def _row(actions: list[Action]) -> list[str]:
    return [f"{a.kind}{a.microbatch}" for a in actions]


def test_gpipe_and_1f1b_tables_are_the_loops_torch_runs() -> None:
    assert {r: _row(a) for r, a in fill_drain_table(2, 2).items()} == {
        0: ["F0", "F1", "B0", "B1"],
        1: ["F0", "F1", "B0", "B1"],
    }
    # Rank r warms up with min(m, p - r) forwards; the last rank alternates from the start.
    assert {r: _row(a) for r, a in one_f_one_b_table(2, 3).items()} == {
        0: ["F0", "F1", "B0", "F2", "B1", "B2"],
        1: ["F0", "B0", "F1", "B1", "F2", "B2"],
    }


def test_simulated_gpipe_timeline_is_the_textbook_diagram() -> None:
    # p = 2, m = 2, F = 1, B = 2:   rank 0  F0 F1 .  .  .  B0 B0 B1 B1
    #                               rank 1  .  F0 F1 B0 B0 B1 B1 .  .
    spans = simulate(fill_drain_table(2, 2))
    placed = {(s.rank, s.action.kind, s.action.microbatch): (s.start, s.end) for s in spans}
    assert placed == {
        (0, "F", 0): (0, 1), (0, "F", 1): (1, 2), (1, "F", 0): (1, 2), (1, "F", 1): (2, 3),
        (1, "B", 0): (3, 5), (1, "B", 1): (5, 7), (0, "B", 0): (5, 7), (0, "B", 1): (7, 9),
    }
    assert simulated_bubble(spans) == pytest.approx(1 - 6 / 9)  # (p-1)/(m+p-1) = 1/3


def test_transfers_delay_the_crossing_actions_only() -> None:
    spans = simulate(fill_drain_table(2, 1), transfer=lambda action: 0.5)
    placed = {(s.rank, s.action.kind): (s.start, s.end) for s in spans}
    assert placed == {(0, "F"): (0, 1), (1, "F"): (1.5, 2.5), (1, "B"): (2.5, 4.5), (0, "B"): (5.0, 7.0)}


# Where the formulas hold: fill-drain for any m; interleaved (divided by v) when m is a multiple of p.
FORMULA_HOLDS = [
    ("gpipe", 2, 1, 1), ("gpipe", 2, 4, 1), ("gpipe", 4, 3, 1), ("1f1b", 2, 4, 1), ("1f1b", 4, 8, 1),
    ("1f1b", 4, 4, 1), ("interleaved-1f1b", 2, 4, 2), ("interleaved-1f1b", 4, 8, 2), ("looped-bfs", 2, 4, 2),
    ("looped-bfs", 4, 8, 4),
]


@pytest.mark.parametrize(("schedule", "p", "m", "v"), FORMULA_HOLDS)
def test_simulation_matches_the_formula_where_it_holds(schedule: str, p: int, m: int, v: int) -> None:
    if schedule not in available_schedules():
        pytest.skip(f"{schedule} is not in this torch")
    info = BY_NAME[schedule]
    assert theoretical_bubble(info, p, m, v) == pytest.approx(formula_bubble(info, p, m, v))


def test_simulation_is_right_where_the_formula_is_not() -> None:
    # Looped BFS, p = 2, v = 2, m = 1: the module docstring's diagram, busy 6 of 12.
    info = BY_NAME["looped-bfs"]
    assert formula_bubble(info, 2, 1, 2) == pytest.approx(1 / 3)
    assert theoretical_bubble(info, 2, 1, 2) == pytest.approx(1 / 2)


@pytest.mark.parametrize("schedule", ["interleaved-zb", "zbv", "dualpipev"])
def test_zero_bubble_schedules_have_a_bubble_and_it_is_smaller(schedule: str) -> None:
    if schedule not in available_schedules():
        pytest.skip(f"{schedule} is not in this torch")
    info, p, m, v = BY_NAME[schedule], 2, 8, 2
    bubble = theoretical_bubble(info, p, m, v)
    assert bubble is not None and 0 <= bubble < theoretical_bubble(BY_NAME["interleaved-1f1b"], p, m, v)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv",
                                      "dualpipev"])
def test_every_table_runs_every_micro_batch_once_on_every_stage(schedule: str) -> None:
    if schedule not in available_schedules():
        pytest.skip(f"{schedule} is not in this torch")
    info = BY_NAME[schedule]
    p, v = 2, info.min_v
    m = 4
    check_schedule(info, p, v, m)
    table = action_table(info, p, v, m)
    done = sorted((a.stage, a.kind, a.microbatch) for actions in table.values() for a in actions)
    stages = range(p * v)
    assert sorted(k for k in done if k[1] == "F") == [(s, "F", i) for s in stages for i in range(m)]
    assert sorted((s, i) for s, k, i in done if k in "BI") == [(s, i) for s in stages for i in range(m)]
    assert sorted((s, i) for s, k, i in done if k == "W") == sorted((s, i) for s, k, i in done if k == "I")


def test_a_table_that_cannot_finish_is_refused() -> None:
    # Rank 0 wants the backward of micro-batch 0 before it has run its forward.
    table = {0: [Action(0, "B", 0), Action(0, "F", 0)], 1: [Action(1, "F", 0), Action(1, "B", 0)]}
    with pytest.raises(ValueError, match="cannot finish"):
        simulate(table)
