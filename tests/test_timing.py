"""A step's compute spans and the pipeline figures made of them, as literal tables (strategies/timing.py)."""

from __future__ import annotations

import pytest
import torch

from strategies.timing import RankTiming, Span, StepLog, StepTimer, busy_ms_by_stage, pipeline_fields, timed_step


def test_pipeline_fields_from_literal_spans() -> None:
    # Two ranks, one stage each, two timed steps of 10 ms (the slowest rank's). Rank 0 computes
    # 6 ms per step, rank 1 4 ms then 2 ms; rank 1 started the recorded step 2 ms after rank 0.
    spans = [Span(0, 0, "F", 0.0, 2.0), Span(0, 0, "B", 6.0, 10.0)]
    assert busy_ms_by_stage(spans) == {0: 6.0}
    rank0 = RankTiming(0, [[0]], busy_ms=[{0: 6.0}, {0: 6.0}], step_ms=[10.0, 9.0], timeline=spans,
                       timeline_start_s=100.0)
    rank1 = RankTiming(1, [[1]], busy_ms=[{1: 4.0}, {1: 2.0}], step_ms=[9.0, 10.0],
                       timeline=[Span(1, 0, "F", 0.5, 3.0)], timeline_start_s=100.002)
    fields = pipeline_fields([rank0, rank1])
    assert fields["stage_busy_ms"] == [6.0, 3.0]
    assert fields["measured_bubble_fraction_per_device"] == pytest.approx([0.4, 0.7])
    assert fields["measured_bubble_fraction"] == pytest.approx(0.55)
    assert fields["stage_imbalance"] == pytest.approx(6.0 / 4.5)
    timeline = fields["timeline"]
    assert timeline[1] == {"rank": 0, "stage": 0, "microbatch": 0, "kind": "B", "start_ms": 6.0, "end_ms": 10.0}
    assert (timeline[2]["rank"], timeline[2]["start_ms"], timeline[2]["end_ms"]) == (1, pytest.approx(2.5),
                                                                                     pytest.approx(5.0))


class FakeClock:
    """``time`` as strategies.timing reads it, advanced by hand: the test asserts exact figures."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def test_timed_step_logs_timed_steps_only_and_leaves_out_what_the_body_excludes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import strategies.timing

    clock = FakeClock()
    monkeypatch.setattr(strategies.timing, "time", clock)
    timer, log = StepTimer(), StepLog(warmup=1)
    cpu = [torch.device("cpu")]
    for step in range(3):
        with timed_step(timer, log, cpu) as step_clock:
            with timer.span(0, step, "F", cpu[0]):
                clock.now += 0.010  # 10 ms of compute
            clock.now += 0.020  # 20 ms of anything else (transfers, a reduction)
            step_clock.excluded_ms = 20.0 if step == 2 else 0.0
    assert log.step == 3
    assert log.busy_ms == [{0: pytest.approx(10.0)}, {0: pytest.approx(10.0)}]  # the warm-up step is not kept
    assert log.step_ms == [pytest.approx(30.0), pytest.approx(10.0)]  # 20 ms left out of the last one
    assert [(s.microbatch, s.start_ms) for s in log.timeline] == [(2, 0.0)]


def test_the_update_is_its_own_share_and_not_the_schedules_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import strategies.timing

    clock = FakeClock()
    monkeypatch.setattr(strategies.timing, "time", clock)
    timer, log = StepTimer(), StepLog(warmup=0)
    cpu = [torch.device("cpu")]
    with timed_step(timer, log, cpu) as step_clock:
        with timer.span(0, 0, "F", cpu[0]):
            clock.now += 0.006  # 6 ms of compute
        clock.now += 0.002  # 2 ms waiting on a peer: the bubble
        with step_clock.update():
            clock.now += 0.004  # 4 ms of optimizer step
    assert log.step_ms == [pytest.approx(8.0)] and log.update_ms == [pytest.approx(4.0)]
    fields = pipeline_fields([RankTiming.of(log, 0, [[0]])])
    assert fields["measured_bubble_fraction"] == pytest.approx(2 / 8)  # not (2 + 4) / 12
    assert (fields["schedule_ms"], fields["update_ms"]) == (pytest.approx(8.0), pytest.approx(4.0))
    assert fields["update_fraction"] == pytest.approx(4 / 12)
