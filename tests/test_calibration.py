"""bench/predict/calibration.py: a calibration's file, what it predicts from, and what it refuses to serve."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.predict.calibration import Calibration, Canary
from bench.predict.communication import Communication
from bench.predict.costs import predict_step
from bench.predict.curves import Curve
from bench.predict.scenario import Scenario
from strategies import ConfigError
from strategies.cost_model import RuntimeOverheads
from tests.helpers.calibrations import FREE, MACHINE, equal_blocks
from tests.helpers.cli import run_in_process


def test_a_calibration_of_another_machine_model_or_torch_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calibration = equal_blocks(2)
    with pytest.raises(ConfigError, match="calibration is of mlp/tiny, not cnn/tiny"):
        calibration.check_matches(MACHINE, "cnn", "tiny")
    with pytest.raises(ConfigError, match="taken with torch '2.x', this machine has '2.y'"):
        calibration.check_matches({**MACHINE, "torch": "2.y"}, "mlp", "tiny")
    path = tmp_path / "cal.json"
    calibration.save(path)
    assert Calibration.load(path) == calibration
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"kind": "run"}))
    with pytest.raises(ConfigError, match="not a calibration"):
        Calibration.load(foreign)
    code, err = run_in_process(capsys, "predict", "--calibration", str(path), "--model", "mlp", "--preset", "tiny",
                               "--out", str(tmp_path / "p.jsonl"))
    assert code == 2 and "calibration was taken with hostname 'here'" in err
    assert len(err.strip().splitlines()) == 1


def test_collectives_come_from_the_curve_measured_on_as_many_processes_as_the_run_has() -> None:
    two = {**FREE, "all_reduce": Curve([(1, 1.0), (2**30, 1.0)])}
    four = {**FREE, "all_reduce": Curve([(1, 5.0), (2**30, 5.0)])}
    calibration = dataclasses.replace(equal_blocks(2), communication={
        2: Communication(two, RuntimeOverheads(ddp_per_step=1.0), 0.5),
        4: Communication(four, RuntimeOverheads(ddp_per_step=7.0), 0.0)})
    assert calibration.collective_ms("all_reduce", 1e6, 2) == 1.0
    assert calibration.collective_ms("all_reduce", 1e6, 4) == 5.0
    assert calibration.collective_ms("all_reduce", 1e6, 8) == 5.0  # the nearest count measured
    assert calibration.runtime_for(4)["ddp_per_step"] == 7.0 and calibration.overlap_for(4) == 0.0
    assert calibration.runtime_for(3)["ddp_per_step"] == 7.0  # between two counts, the larger
    # 4 processes on 2 cores: a ddp step waits for the 4-process all-reduce and runtime, not the 2-process ones.
    step = predict_step(calibration, Scenario("ddp", 4, 64), 1)
    assert step.exposed_comm_ms == pytest.approx(5.0 + 7.0)


def test_a_pipelines_transfers_come_from_the_send_recv_curve_of_as_many_processes_as_it_has() -> None:
    def sends(ms: float) -> dict[str, Curve]:
        return {**FREE, "send_recv": Curve([(1, ms), (2**30, ms)])}

    calibration = dataclasses.replace(equal_blocks(4), communication={2: Communication(sends(0.5)),
                                                                      4: Communication(sends(2.0))})
    assert calibration.transfer_ms(1e6, 0, 1) == 0.5 and calibration.transfer_ms(1e6, 0, 1, processes=4) == 2.0
    assert calibration.transfer_ms(1e6, 2, 3, processes=3) == 2.0  # between two counts, the larger
    # no byte scaling of a ring's share: a point-to-point message moves its bytes once, whatever the count
    assert calibration.transfer_ms(1e6, 0, 1, processes=8) == 2.0
    # a 4-rank GPipe's critical path crosses its 3 boundaries twice (forward, backward) for its first
    # micro-batch, each at 4 processes' price: 1.5 ms more each than at 2 processes'
    scenario = Scenario("pp", 4, 16, microbatches=4, schedule="gpipe")
    two_only = dataclasses.replace(calibration, communication={2: calibration.communication[2],
                                                               4: Communication(sends(0.5))})
    assert predict_step(calibration, scenario, 1).step_ms == pytest.approx(
        predict_step(two_only, scenario, 1).step_ms + 2 * 3 * 1.5)


def test_ddp_on_one_device_pays_the_runtime_measured_on_one_process_and_collectives_ignore_that_entry() -> None:
    two = {**FREE, "all_reduce": Curve([(1, 1.0), (2**30, 1.0)])}
    calibration = dataclasses.replace(equal_blocks(2), communication={
        1: Communication({}, RuntimeOverheads(ddp_per_step=0.25)),
        2: Communication(two, RuntimeOverheads(ddp_per_step=3.0), 0.5, 0.04)})
    assert calibration.runtime_for(1)["ddp_per_step"] == 0.25 and calibration.runtime_for(2)["ddp_per_step"] == 3.0
    assert calibration.collective_ms("all_reduce", 1e6, 3) == 1.0  # the nearest count with collectives: 2, not 1
    assert calibration.overlap_for(1) == 0.5 and calibration.spread_for(2) == 0.04
    alone = dataclasses.replace(calibration, communication={1: calibration.communication[1]})
    assert alone.runtime_for(1)["ddp_per_step"] == 0.25 and alone.overlap_for(2) == 1.0
    with pytest.raises(KeyError, match="no collectives measured"):
        alone.collective_ms("all_reduce", 1e6, 2)


def test_a_calibration_keeps_its_canary_through_its_file(tmp_path: Path) -> None:
    canaries = (Canary(threads=2, batch=64, ms=3.5), Canary(threads=1, batch=32, ms=4.25))
    calibration = dataclasses.replace(equal_blocks(2), canaries=canaries, global_batch=64)
    calibration.save(tmp_path / "c.json")
    loaded = Calibration.load(tmp_path / "c.json")
    assert loaded.canaries == canaries and loaded.canary_for(1, 32) == canaries[1] and loaded.canary_for(1, 64) is None
    assert loaded.global_batch == 64


def test_ranks_beyond_the_cores_take_turns_on_them_at_the_cores_slowdown() -> None:
    on_two_cores = dataclasses.replace(equal_blocks(2), machine={**MACHINE, "cpu_cores": 2},
                                       slowdown={2: 1.03, 4: 2.57})
    for processes, shared in [(1.5, 1.015), (2, 1.03), (3, 1.545), (4, 2.06)]:
        assert on_two_cores.action_slowdown(processes) == pytest.approx(shared)
    assert on_two_cores.slowdown_for(4) == 2.57  # processes computing side by side for a second: as measured
    # never beyond what was measured, nor anywhere the cores are unknown or not shared
    assert dataclasses.replace(on_two_cores, slowdown={2: 1.5, 4: 2.5}).action_slowdown(4) == 2.5
    for unshared in (dataclasses.replace(on_two_cores, machine=MACHINE),
                     dataclasses.replace(on_two_cores, accelerator="cuda")):
        assert unshared.action_slowdown(4) == unshared.slowdown_for(4) == 2.57
