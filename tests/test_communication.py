"""bench/predict/communication.py: what N processes cost beyond their compute, and its file form."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bench.predict.communication import Communication
from bench.predict.curves import Curve
from strategies.cost_model import RuntimeOverheads


def test_a_residual_is_read_on_the_line_through_its_two_reference_batches_and_held_beyond_them() -> None:
    measured = Communication({"all_reduce": Curve([(1, 0.5), (2**20, 3.0)])}, RuntimeOverheads(ddp_per_step=2.0),
                             overlap=0.5, runtime_batch=8, runtime_per_sample=RuntimeOverheads(ddp_per_step=-0.025),
                             runtime_last_batch=96)
    assert measured.runtime_at(52)["ddp_per_step"] == pytest.approx(2.0 - 0.025 * 44)
    assert measured.runtime_at(96)["ddp_per_step"] == pytest.approx(-0.2)  # below zero, as measured
    assert measured.runtime_at(400)["ddp_per_step"] == pytest.approx(-0.2)  # beyond the two: the nearer one's
    assert measured.runtime_at(2)["ddp_per_step"] == pytest.approx(2.0)
    assert measured.runtime_at(None) == {"ddp_per_step": 2.0}  # no batch: where the small runs measured it
    assert measured.runtime_at(52)["tp_per_layer"] == 0.0  # a term not measured costs nothing
    assert Communication.from_json(json.loads(json.dumps(asdict(measured)))) == measured
