"""bench/harness/attach.py: a prediction handed to the run it predicts, and its error against the measurement."""

from __future__ import annotations

import json

import pytest

from bench.harness.attach import CARRIED, PREDICTION_VARIABLE, handed_over, prediction_fields, rescored


def test_only_the_carried_fields_are_handed_over_and_the_record_gets_the_signed_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prediction = {"kind": "prediction", "strategy": "ddp", "predicted_step_time_ms": 12.0, "notes": ["fitted"]}
    env = handed_over(prediction)
    assert list(env) == [PREDICTION_VARIABLE]
    carried = json.loads(env[PREDICTION_VARIABLE])
    assert list(carried) == list(CARRIED)  # every carried field, the missing ones as None, nothing else
    assert (carried["predicted_step_time_ms"], carried["notes"], carried["fitted"]) == (12.0, ["fitted"], None)
    monkeypatch.setenv(PREDICTION_VARIABLE, env[PREDICTION_VARIABLE])
    fields = prediction_fields(measured_step_ms=10.0)
    assert fields["prediction"] == carried
    assert fields["prediction_error"] == pytest.approx(0.2)  # predicted / measured - 1: pessimistic by 20%
    assert prediction_fields(measured_step_ms=0.0)["prediction_error"] is None  # nothing measured to hold it to


def test_a_run_handed_no_prediction_records_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREDICTION_VARIABLE, raising=False)
    assert prediction_fields(10.0) == {}
    monkeypatch.setenv(PREDICTION_VARIABLE, json.dumps({"predicted_step_time_ms": None}))
    assert prediction_fields(10.0) == {"prediction": {"predicted_step_time_ms": None}, "prediction_error": None}


def test_a_rescored_record_holds_the_new_prediction_its_error_and_the_one_handed_over() -> None:
    record = {"status": "ok", "step_time_ms_median": 10.0, "prediction_error": 0.2,
              "prediction": {"predicted_step_time_ms": 12.0, "canary_ms": 3.0}}
    again = rescored(record, {"predicted_step_time_ms": 11.0, "canary_ms": 3.0, "canary_after_ms": 4.0,
                              "strategy": "ddp"})
    assert again["prediction_error"] == pytest.approx(0.1)
    assert again["prediction"]["predicted_step_time_ms_before_run"] == 12.0
    assert again["prediction"]["canary_after_ms"] == 4.0 and "strategy" not in again["prediction"]  # carried only
    assert record["prediction_error"] == 0.2  # the record given is left as it was
