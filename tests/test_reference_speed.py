"""bench/predict/reference_speed.py: a step of reference runs timed between canaries, a move across it said, and
brought back to the compute's speed as far as a run's drift is taken out."""

from __future__ import annotations

import pytest

from bench.predict.canary import taken_out
from bench.predict.reference_speed import StepSpeed, at_calibration_speed, timed_between


def test_the_speed_of_a_step_is_its_canaries_mean_against_the_calibrations() -> None:
    speed = StepSpeed(before={1: 40.0, 2: 30.0}, after={1: 36.0, 2: 30.0})
    assert speed.moved() == pytest.approx(0.1)  # the one-thread layout's 40 -> 36
    assert speed.drift(1, calibrated_ms=48.0) == pytest.approx((40.0 * 36.0) ** 0.5 / 48.0)
    assert speed.drift(2, calibrated_ms=30.0) == pytest.approx(1.0)
    assert speed.drift(4, calibrated_ms=30.0) is None  # no canary of that layout


def test_a_step_is_timed_between_canaries_and_a_move_across_it_said(caplog: pytest.LogCaptureFixture) -> None:
    order: list[str] = []
    readings = iter([{1: 40.0}, {1: 30.0}])  # 25% quicker across the step
    step = lambda: order.append("step") or "ran"  # noqa: E731
    canaries = lambda: order.append("canary") or next(readings)  # noqa: E731
    result, speed = timed_between(step, canaries, "the reference runs on 2 rank(s)")
    assert (result, speed, order) == ("ran", StepSpeed({1: 40.0}, {1: 30.0}), ["canary", "step", "canary"])
    assert "moved 25% across the reference runs on 2 rank(s): the drift taken out from their mean" in caplog.text
    caplog.clear()
    steady = iter([{1: 30.0}, {1: 31.0}])
    timed_between(lambda: None, lambda: next(steady), "a step")
    assert caplog.text == ""  # within 10%: nothing to say


def test_reference_runs_are_brought_back_to_the_computes_speed_as_a_runs_drift_is_taken_out() -> None:
    # a reference run at a 0.81 drift (the machine quicker), its bubble a fraction; mp's one process has its own
    drifts = {"pp": 0.81, "mp": 1.21}
    step_ms = {"pp": 81.0, "pp:bubble": 0.3, "mp": 121.0, "ddp": 50.0}
    back = at_calibration_speed(step_ms, lambda name: drifts.get(name.partition(":")[0]))
    assert back == pytest.approx({"pp": 81.0 / 0.9, "pp:bubble": 0.3, "mp": 121.0 / 1.1, "ddp": 50.0})
    # the sweep scales a run's prediction by taken_out of its drift: the same run at the same speed is
    # predicted as measured only where the reference was brought back by the same amount
    assert back["pp"] * taken_out(0.81) == pytest.approx(81.0)
    assert step_ms["pp"] * taken_out(0.81) != pytest.approx(81.0, rel=0.05)  # left as measured, it misses
