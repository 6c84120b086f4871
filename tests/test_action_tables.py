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


def _schedule_row(actions: list[Action]) -> str:
    return " ".join(f"{a.kind}{a.stage}.{a.microbatch}" for a in actions)


# The zero-bubble schedules' orders as torch plans them (kind, stage.micro-batch), and their timelines
# replayed by hand with F = I = W = 1, B = 2:
#
#   interleaved-zb, p = 2, m = 2 (one stage per rank); busy 6 of 7 on each rank, bubble 1/7:
#     rank 0   F0.0 F0.1 .    I0.0 W0.0 I0.1 W0.1
#     rank 1   .    F1.0 I1.0 F1.1 I1.1 W1.0 W1.1
#
#   zbv, p = 2, v = 2, m = 2 (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2: the V); busy 12 of 14:
#     rank 0   F0.0 F0.1 .    F3.0 I3.0 W3.0 F3.1 I3.1 W3.1 I0.0 W0.0 .    I0.1 W0.1
#     rank 1   .    F1.0 F2.0 F1.1 F2.1 I2.0 W2.0 I1.0 W1.0 I2.1 W2.1 I1.1 W1.1 .
ZERO_BUBBLE_TABLES = {
    ("interleaved-zb", 1, 2): ({0: "F0.0 F0.1 I0.0 W0.0 I0.1 W0.1", 1: "F1.0 I1.0 F1.1 I1.1 W1.0 W1.1"}, 1 / 7),
    ("zbv", 2, 2): ({0: "F0.0 F0.1 F3.0 I3.0 W3.0 F3.1 I3.1 W3.1 I0.0 W0.0 I0.1 W0.1",
                     1: "F1.0 F2.0 F1.1 F2.1 I2.0 W2.0 I1.0 W1.0 I2.1 W2.1 I1.1 W1.1"}, 1 / 7),
    # DualPipeV needs m >= its 4 stages; its full backwards (B) are the overlapped F/B pairs. Rank 0 idles
    # once, between F3.3 (ends at 16) and B0.1 (waits for B1.1, which ends at 17): busy 24 of 25.
    ("dualpipev", 2, 4): ({0: "F0.0 F0.1 F0.2 F3.0 I3.0 W3.0 F3.1 F0.3 B3.1 F3.2 B0.0 B3.2 F3.3 B0.1 B3.3 I0.2 W0.2 "
                              "I0.3 W0.3",
                           1: "F1.0 F2.0 F1.1 F2.1 F1.2 B2.0 F2.2 B1.0 F1.3 B2.1 F2.3 B1.1 B2.2 B1.2 I2.3 I1.3 W2.3 "
                              "W1.3"}, 1 / 25),
}


@pytest.mark.parametrize(("schedule", "v", "m"), list(ZERO_BUBBLE_TABLES), ids=[k[0] for k in ZERO_BUBBLE_TABLES])
def test_zero_bubble_schedules_run_their_literal_tables_with_their_literal_bubbles(
    schedule: str, v: int, m: int
) -> None:
    if schedule not in available_schedules():
        pytest.skip(f"{schedule} is not in this torch")
    table, bubble = ZERO_BUBBLE_TABLES[(schedule, v, m)]
    info = BY_NAME[schedule]
    assert {r: _schedule_row(a) for r, a in action_table(info, 2, v, m).items()} == table
    assert theoretical_bubble(info, 2, m, v) == pytest.approx(bubble)


def _diagram(spans: list) -> dict[int, str]:
    """Each rank's simulated timeline drawn as above: one cell per time unit, "." where it idles."""
    makespan = int(max(s.end for s in spans))
    cells = {s.rank: ["."] * makespan for s in spans}
    for s in spans:
        cells[s.rank][int(s.start)] = f"{s.action.kind}{s.action.stage}.{s.action.microbatch}"
        for t in range(int(s.start) + 1, int(s.end)):
            cells[s.rank][t] = "--"
    return {r: " ".join(row) for r, row in cells.items()}


@pytest.mark.parametrize("schedule", ["interleaved-zb", "zbv"])
def test_the_zero_bubble_timelines_are_the_hand_drawn_ones(schedule: str) -> None:
    if schedule not in available_schedules():
        pytest.skip(f"{schedule} is not in this torch")
    v = 1 if schedule == "interleaved-zb" else 2
    drawn = {
        "interleaved-zb": {0: "F0.0 F0.1 . I0.0 W0.0 I0.1 W0.1", 1: ". F1.0 I1.0 F1.1 I1.1 W1.0 W1.1"},
        "zbv": {0: "F0.0 F0.1 . F3.0 I3.0 W3.0 F3.1 I3.1 W3.1 I0.0 W0.0 . I0.1 W0.1",
                1: ". F1.0 F2.0 F1.1 F2.1 I2.0 W2.0 I1.0 W1.0 I2.1 W2.1 I1.1 W1.1 ."},
    }[schedule]
    assert _diagram(simulate(action_table(BY_NAME[schedule], 2, v, 2))) == drawn


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


def test_a_staggered_rank_s_step_is_timed_from_its_own_start() -> None:
    from strategies.action_tables import Action, SimulatedSpan, staggered_bubble

    # rank 0 begins at 0 and waits for rank 1, which begins at 3: rank 0's step is 5 long (busy 2), rank 1's 2 (busy 2)
    spans = [SimulatedSpan(0, Action(0, "F", 0), 0.0, 1.0), SimulatedSpan(0, Action(0, "B", 0), 4.0, 5.0),
             SimulatedSpan(1, Action(1, "F", 0), 3.0, 4.0), SimulatedSpan(1, Action(1, "B", 0), 4.0, 5.0)]
    assert staggered_bubble(spans, {0: 0.0, 1: 3.0}) == pytest.approx(1 - 4 / (2 * 5))
    assert staggered_bubble(spans, {0: 0.0, 1: 0.0}) == pytest.approx(1 - 4 / (2 * 5))  # the same longest step
    assert staggered_bubble(spans, {0: 2.0, 1: 3.0}) == pytest.approx(1 - 4 / (2 * 3))  # rank 0 from 2: 3 long
