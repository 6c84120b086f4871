"""A pipeline run's actions against the ones its prediction replayed (reports/spans.py)."""

from __future__ import annotations

import pytest

from reports.spans import INPUT_AWAITED, INPUT_FIRST, OWN_INPUT, actions_over_predicted, start_delays


def span(rank: int, kind: str, microbatch: int, start: float, end: float) -> dict[str, object]:
    return {"rank": rank, "stage": rank, "kind": kind, "microbatch": microbatch, "start_ms": start, "end_ms": end}


PREDICTED = [span(0, "F", 0, 0.0, 2.0), span(1, "F", 0, 2.0, 4.0), span(1, "B", 0, 4.0, 24.0),
             span(0, "B", 0, 24.0, 28.0)]


def test_the_actions_time_is_summed_over_the_time_predicted_for_them_so_heavy_actions_weigh_as_they_do() -> None:
    # the 20 ms backward ran in 15, the three short actions as predicted: 23 of 28 ms
    measured = [span(0, "F", 0, 10.0, 12.0), span(1, "F", 0, 13.0, 15.0), span(1, "B", 0, 15.0, 30.0),
                span(0, "B", 0, 31.0, 35.0)]
    assert actions_over_predicted(measured, PREDICTED) == 23 / 28  # a median of the ratios would read 1.0


def test_only_the_actions_both_timelines_hold_are_compared() -> None:
    # an action the prediction did not replay (another micro-batch) is not counted against it
    measured = [span(0, "F", 0, 0.0, 4.0), span(0, "F", 1, 4.0, 100.0)]
    assert actions_over_predicted(measured, PREDICTED) == 2.0


def test_none_without_both_timelines_or_without_an_action_in_common() -> None:
    assert actions_over_predicted(None, PREDICTED) is None
    assert actions_over_predicted(PREDICTED, []) is None
    assert actions_over_predicted([span(3, "W", 0, 0.0, 1.0)], PREDICTED) is None
    assert actions_over_predicted(PREDICTED, [span(0, "F", 0, 1.0, 1.0)]) is None  # nothing predicted to divide by


def test_a_timeline_that_names_no_stages_holds_one_stage_a_rank() -> None:
    # records written before the timeline named its stages (tests/helpers/records.py's TIMELINE)
    unnamed = [{k: v for k, v in s.items() if k != "stage"} for s in PREDICTED]
    assert actions_over_predicted(unnamed, PREDICTED) == 1.0


def on(rank: int, stage: int, kind: str, microbatch: int, start: float, end: float) -> dict[str, object]:
    return {**span(rank, kind, microbatch, start, end), "stage": stage}


def test_each_action_is_timed_from_when_its_rank_came_free_or_its_input_was_sent_whichever_came_later() -> None:
    # GPipe, 2 ranks, 2 micro-batches. Rank 1's F1: its input was sent at 4.5, the rank free at 9: input first, 3.0 ms.
    # Rank 0's backwards: free at 4.5 and 12, their inputs sent at 9 and 16: awaited, 1.0 ms each. Own inputs (rank
    # 0's F1, rank 1's backwards): 0.5, 0.2 and 0.1 ms. A rank's first action has nothing before it to time from.
    timeline = [on(0, 0, "F", 0, 0.0, 2.0), on(0, 0, "F", 1, 2.5, 4.5), on(0, 0, "B", 0, 10.0, 12.0),
                on(0, 0, "B", 1, 17.0, 19.0), on(1, 1, "F", 0, 3.0, 5.0), on(1, 1, "B", 0, 5.2, 9.0),
                on(1, 1, "F", 1, 12.0, 14.0), on(1, 1, "B", 1, 14.1, 16.0)]
    delays = start_delays(timeline)
    assert delays[INPUT_FIRST] == 3.0
    assert delays[INPUT_AWAITED] == 1.0
    assert delays[OWN_INPUT] == pytest.approx(0.2)


def test_an_input_comes_from_the_action_s_own_pipeline_not_from_another_replica_s() -> None:
    # dp 2 x pp 2: ranks 0-1 one pipeline, 2-3 the other. Rank 1's F1 took its input from rank 0 (sent at 4, the rank
    # free at 4.5: 5.5 ms); rank 3's from rank 2 (sent at 22, after the rank came free: 1.0 ms). Matched to the other
    # replica's stage 0 (ranks 1 and 2 are equally near), rank 1's F1 would read as awaited and start before its input.
    timeline = [on(0, 0, "F", 0, 0.0, 2.0), on(0, 0, "F", 1, 2.0, 4.0), on(1, 1, "F", 0, 2.5, 4.5),
                on(1, 1, "F", 1, 10.0, 11.0), on(2, 0, "F", 0, 0.0, 2.0), on(2, 0, "F", 1, 20.0, 22.0),
                on(3, 1, "F", 0, 2.5, 4.5), on(3, 1, "F", 1, 23.0, 24.0)]
    delays = start_delays(timeline)
    assert (delays[INPUT_FIRST], delays[INPUT_AWAITED]) == (5.5, 1.0)
    assert delays[OWN_INPUT] == 9.0  # stage 0's second forwards: 0 and 18 ms after their ranks came free


def test_a_neighbouring_stage_on_the_same_rank_is_the_action_s_own_input() -> None:
    # a V-shaped schedule's turn: stages 1 and 2 both on rank 1, so stage 2's forward waits on no other rank
    timeline = [on(0, 0, "F", 0, 0.0, 1.0), on(1, 1, "F", 0, 1.2, 2.0), on(1, 2, "F", 0, 2.5, 3.0),
                on(0, 3, "F", 0, 3.3, 4.0)]
    delays = start_delays(timeline)
    assert delays[OWN_INPUT] == 0.5
    assert delays[INPUT_FIRST] is None
    assert delays[INPUT_AWAITED] == pytest.approx(0.3)  # stage 3 on rank 0, its input sent at 3.0


def test_no_timeline_no_delays() -> None:
    assert start_delays(None) == {INPUT_FIRST: None, INPUT_AWAITED: None, OWN_INPUT: None}
