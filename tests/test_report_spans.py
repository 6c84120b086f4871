"""A pipeline run's actions against the ones its prediction replayed (reports/spans.py)."""

from __future__ import annotations

from reports.spans import actions_over_predicted


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
