"""bench/predict/canary.py: the machine's drift between its calibration and each run, measured, noted and taken out
of the prediction."""

from __future__ import annotations

import functools

import pytest
import torch

import models
from bench.predict.calibration import Canary
from bench.predict.canary import canary_ms, corrected, drift_fields
from strategies.base import OptimizerChoice


@pytest.mark.launches
def test_the_canary_is_the_model_s_own_step_a_positive_time_that_repeats_within_a_factor() -> None:
    make_spec = functools.partial(models.build_model, "mlp", "tiny", "batch")
    build = OptimizerChoice(torch.optim.SGD, {"lr": 0.1}).build  # picklable: the canary runs in a forked process
    first, second = (canary_ms(make_spec, 8, 1, build, torch.device("cpu")) for _ in range(2))
    assert first > 0 and second > 0 and 0.2 < first / second < 5


def test_drift_beyond_ten_percent_is_noted_and_within_it_is_not() -> None:
    at_calibration = Canary(threads=1, batch=8, ms=4.0)
    slower, note = drift_fields(at_calibration, 5.2)
    assert slower["canary_drift"] == pytest.approx(1.3) and "1.30x as long as at calibration" in note
    assert drift_fields(at_calibration, 4.2)[1] == ""
    assert "0.50x" in drift_fields(at_calibration, 2.0)[1]  # a machine that sped up moved too
    assert drift_fields(None, None)[0]["canary_drift"] is None


def test_a_drift_scales_every_predicted_time_and_keeps_the_step_at_calibration() -> None:
    prediction = {"predicted_step_time_ms": 10.0, "predicted_step_time_ms_interval": [8.0, 12.5],
                  "predicted_compute_ms": 6.0, "predicted_exposed_comm_ms": 3.0, "predicted_update_ms": 1.0,
                  "predicted_samples_per_s": 6400.0, "predicted_bubble": 0.25,
                  "predicted_timeline": [{"rank": 0, "start_ms": 1.0, "end_ms": 3.0}]}
    slower = corrected(prediction, 1.2)
    assert slower["predicted_step_time_ms"] == pytest.approx(12.0)
    assert slower["predicted_step_time_ms_at_calibration"] == 10.0
    assert slower["predicted_step_time_ms_interval"] == pytest.approx([9.6, 15.0])
    assert (slower["predicted_compute_ms"], slower["predicted_exposed_comm_ms"], slower["predicted_update_ms"]) == (
        pytest.approx(7.2), pytest.approx(3.6), pytest.approx(1.2))
    assert slower["predicted_samples_per_s"] == pytest.approx(6400 / 1.2) and slower["predicted_bubble"] == 0.25
    assert slower["predicted_timeline"] == [{"rank": 0, "start_ms": pytest.approx(1.2), "end_ms": pytest.approx(3.6)}]
    unmeasured = corrected(prediction, None)
    assert unmeasured["predicted_step_time_ms"] == unmeasured["predicted_step_time_ms_at_calibration"] == 10.0


def test_a_runs_canary_is_one_pass_of_one_of_its_processes() -> None:
    from bench.predict.canary import canary_layout
    from strategies.cost_model import threads_per_process

    cores = threads_per_process(1)
    assert canary_layout(64, 1, 1) == (cores, 64)  # single, ddp on one device
    assert canary_layout(64, 1, 4) == (cores, 16)  # mp: one process, 4 micro-batches
    assert canary_layout(64, 2, 4) == (threads_per_process(2), 8)  # pp: each rank's micro-batch


def test_a_canary_timed_after_the_run_too_brackets_it_and_a_move_between_the_two_is_noted() -> None:
    from bench.predict.canary import bracketed

    at_calibration = Canary(threads=2, batch=2, ms=27.0)
    assert bracketed(27.0, 48.0) == pytest.approx(36.0)  # geometric: a factor either way counts alike
    moved, note = drift_fields(at_calibration, 27.0, 48.0)
    assert (moved["canary_ms"], moved["canary_after_ms"]) == (27.0, 48.0)
    assert moved["canary_drift"] == pytest.approx(36.0 / 27.0)
    assert "27 ms before the run and 48 after it" in note and "1.33x as long as at calibration" in note
    steady, note = drift_fields(at_calibration, 27.0, 28.0)
    assert steady["canary_drift"] == pytest.approx((27.0 * 28.0) ** 0.5 / 27.0) and note == ""
