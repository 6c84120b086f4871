"""bench/predict/canary.py: the machine's drift between its calibration and each run, measured and noted."""

from __future__ import annotations

import pytest

from bench.predict.canary import canary_ms, drift_fields


def test_the_canary_is_a_positive_time_and_repeats_within_a_factor() -> None:
    first, second = canary_ms(), canary_ms()
    assert first > 0 and second > 0 and 0.2 < first / second < 5


def test_drift_beyond_ten_percent_is_noted_and_within_it_is_not() -> None:
    slower, note = drift_fields(4.0, 5.2)
    assert slower["canary_drift"] == pytest.approx(1.3) and "1.30x as long as at calibration" in note
    assert drift_fields(4.0, 4.2)[1] == ""
    assert "0.50x" in drift_fields(4.0, 2.0)[1]  # a machine that sped up moved too
    assert drift_fields(None, 4.0)[0]["canary_drift"] is None


