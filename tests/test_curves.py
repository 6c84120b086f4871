"""bench/predict/curves.py: a line through the batches measured, a curve through the message sizes."""

from __future__ import annotations

import pytest

from bench.predict.curves import Curve, Line


def test_a_curve_is_linear_between_its_points_and_never_negative() -> None:
    curve = Curve([(1024, 1.0), (4096, 4.0)])
    assert curve.at(2048) == pytest.approx(2.0) and curve.at(8192) == pytest.approx(8.0)
    assert curve.at(0) == 0.0 and curve.at(10) >= 0.0
    fitted = Line.fit([(1, 3.0), (3, 7.0), (4, 7.5)])
    assert fitted.at(3) == pytest.approx(7.0) and fitted.at(2) == pytest.approx(5.0)  # through every point
    assert fitted.at(8) == pytest.approx(9.5)  # beyond: the last segment's slope
    assert Line(1.0, 2.0).at(3) == 7.0  # no points: the straight line
    assert Line.fit([(1, -2.0), (4, -8.0)]).signed_at(2) == pytest.approx(-4.0)  # a difference may go below zero
