"""Calibrations written by hand, for the predictor's tests: equal blocks at fixed times, free collectives."""

from __future__ import annotations

from bench.harness.launch import threads_per_process
from bench.predict.calibration import BlockCost, Calibration, ComputeCosts, Line
from bench.predict.communication import Communication
from bench.predict.curves import Curve

MACHINE = {"hostname": "here", "torch": "2.x"}
FREE = {name: Curve([(1, 0.0), (2**30, 0.0)]) for name in
        ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")}


def equal_blocks(blocks: int, forward: float = 1.0, backward: float = 2.0, parameters: int = 1000,
                 curves: dict[str, Curve] | None = None, update: float = 0.0, overlap: float = 1.0) -> Calibration:
    """Equal blocks whose forward takes ``forward`` ms and backward ``backward`` ms whatever the batch."""
    cost = BlockCost(Line(forward, 0.0), Line(backward, 0.0), parameters, 100.0, 10.0)
    costs = ComputeCosts([cost] * blocks, update / (blocks * parameters))
    threads = {t: costs for t in {threads_per_process(1), threads_per_process(2), threads_per_process(4)}}
    communication = {2: Communication(curves or FREE, overlap=overlap)}
    return Calibration("mlp", "tiny", "group", "fp32", "cpu", "gloo", MACHINE, threads, communication, {2: 1.0, 4: 1.0})
