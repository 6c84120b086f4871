"""bench/predict/calibrate.py, calibration.py, compute.py, collectives.py: what a calibration measures and
refuses, and one calibrate -> predict -> sweep trip."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import models
from bench.cli import main
from bench.harness.disturbance import Verdict
from bench.harness.records import read_records
from bench.predict.calibration import Calibration, Communication, Curve, Line
from bench.predict.costs import predict_step
from bench.predict.scenario import Scenario
from strategies import ConfigError
from strategies.cost_model import RuntimeOverheads
from tests.helpers.calibrations import FREE, MACHINE, equal_blocks
from tests.helpers.cli import run_bench, run_in_process


def test_calibration_splits_each_blocks_backward_into_its_input_and_weight_gradients() -> None:
    import torch

    from bench.predict.backward_split import split_backward_ms
    from bench.predict.compute import block_times_ms

    spec = models.build_model("mlp", "tiny", "group")
    torch.manual_seed(0)
    whole = block_times_ms(spec, 64, torch.device("cpu"), 3)
    split = split_backward_ms(spec, 64, torch.device("cpu"), 3)
    if split is None:
        pytest.skip("this torch's pipelining offers no I/W split the calibration can call")
    assert len(split) == len(whole) and all(i >= 0 and w > 0 for i, w in split)
    first_input = spec.make_batch(2, torch.Generator().manual_seed(0))[0]
    if not first_input.is_floating_point():  # token ids take no gradient: the first block has no I
        assert split[0][0] < 0.05


def test_a_curve_is_linear_between_its_points_and_never_negative() -> None:
    curve = Curve([(1024, 1.0), (4096, 4.0)])
    assert curve.at(2048) == pytest.approx(2.0) and curve.at(8192) == pytest.approx(8.0)
    assert curve.at(0) == 0.0 and curve.at(10) >= 0.0
    fitted = Line.fit([(1, 3.0), (3, 7.0), (4, 7.5)])
    assert fitted.at(3) == pytest.approx(7.0) and fitted.at(2) == pytest.approx(5.0)  # through every point
    assert fitted.at(8) == pytest.approx(9.5)  # beyond: the last segment's slope
    assert Line(1.0, 2.0).at(3) == 7.0  # no points: the straight line
    assert Line.fit([(1, -2.0), (4, -8.0)]).signed_at(2) == pytest.approx(-4.0)  # a difference may go below zero


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


@pytest.mark.alone
@pytest.mark.distributed
def test_calibrate_then_predict_then_a_sweep_that_records_each_prediction_and_its_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.predict import calibrate

    # The shared cores' slowdown over 0.5 s windows, not 2 s: its 3 pairs were 12 s of this test's 32.
    measure_slowdown = calibrate.slowdown
    monkeypatch.setattr(calibrate, "slowdown", lambda *args, **kwargs: measure_slowdown(*args, **{**kwargs,
                                                                                                 "seconds": 0.5}))
    calibration = tmp_path / "cal.json"
    # calibrate and predict here (their processes start from the fork server); the sweep's children afresh.
    assert main(["calibrate", "--model", "mlp", "--preset", "tiny", "--devices", "1,2", "--microbatches", "1",
                 "--collective-max-mib", "1", "--repeats", "2", "--groups", "1", "--out", str(calibration)]) == 0
    predictions = tmp_path / "predictions.jsonl"
    assert main(["predict", "--calibration", str(calibration), "--model", "mlp", "--preset", "tiny",
                 "--strategies", "single,ddp,fsdp", "--devices", "1,2", "--out", str(predictions)]) == 0
    records, _ = read_records(predictions)
    # single runs on one device only: that point is left out, with a warning.
    assert [(r["strategy"], r["device_count"]) for r in records] == [("single", 1), ("ddp", 1), ("ddp", 2),
                                                                      ("fsdp", 1), ("fsdp", 2)]
    assert all(r["kind"] == "prediction" and r["predicted_step_time_ms"] > 0 for r in records)
    out = tmp_path / "sweep.jsonl"
    # One child of each kind: a process of its own (mp) and torchrun's workers (ddp).
    proc = run_bench("sweep", "--calibration", str(calibration), "--strategies", "mp,ddp", "--models", "mlp",
                     "--preset", "tiny", "--devices", "2", "--microbatches", "1", "--repeats", "1", "--steps", "2",
                     "--warmup", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [r for r in read_records(out)[0] if r["status"] == "ok"]
    assert {r["strategy"] for r in runs} == {"mp", "ddp"}
    assert all(r["prediction"]["predicted_step_time_ms"] > 0 for r in runs)
    for r in runs:
        assert r["prediction_error"] == pytest.approx(
            r["prediction"]["predicted_step_time_ms"] / r["step_time_ms_median"] - 1)


def test_collectives_and_reference_steps_are_the_median_over_groups_of_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of processes keeps its placement on the cores for its whole life: one badly placed group must
    set neither a collective's curve nor a runtime's residual."""
    import os

    import torch

    from bench.predict import collectives

    groups = iter([({"all_reduce": [(4096, 5.5), (16384, 6.0)]}, {"tp": 30.0, "overlap": 1.0}),
                   ({"all_reduce": [(4096, 0.5), (16384, 0.9)]}, {"tp": 16.0, "overlap": 0.1}),
                   ({"all_reduce": [(4096, 0.6), (16384, 0.7)]}, {"tp": 17.0, "overlap": 0.2})])

    def one_group(target: object, args: tuple, nprocs: int) -> None:  # what rank 0 of a group leaves behind
        torch.save(next(groups), os.path.join(args[1], "collectives.pt"))

    monkeypatch.setattr(collectives, "start_ranks", one_group)
    curves, steps = collectives.measure_collectives(2, "cpu", [4096, 16384], groups=3)
    assert curves["all_reduce"].points == [(4096, 0.6), (16384, 0.9)]
    # and the calibration's own spread: half tp's range over the groups, over its median
    assert steps == {"tp": 17.0, "overlap": 0.2, "spread": pytest.approx((30.0 - 16.0) / 2 / 17.0)}


def test_small_messages_are_timed_several_to_a_repeat() -> None:
    """One operation alone after the barrier also times how late each rank left it."""
    from bench.predict.collectives import KIB, _operations_per_repeat

    assert [_operations_per_repeat(size) for size in (4 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB, 256 * KIB * KIB)] \
        == [16, 16, 4, 1, 1]


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


def test_calibrate_refuses_an_output_it_cannot_write_before_measuring_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_in_process(capsys, "calibrate", "--model", "mlp", "--preset", "tiny", "--out", str(tmp_path))
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1
    code, err = run_in_process(capsys, "calibrate", "--model", "mlp", "--preset", "tiny", "--groups", "0",
                               "--out", str(tmp_path / "cal.json"))
    assert code == 2 and "--groups must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cal.json").exists()


def test_calibration_times_every_batch_share_a_sweep_runs_not_only_the_micro_batches() -> None:
    from bench.predict.calibrate import calibration_batches

    # ddp on 2 and 4 devices runs 32 and 16 samples per process even where the sweep asks for 4 micro-batches.
    assert calibration_batches(64, (2, 4), (4,)) == [4, 8, 16, 32, 64]
    assert calibration_batches(8, (4,), (1,)) == [2, 8]


def test_the_slowdown_is_never_below_the_cores_share(monkeypatch: pytest.MonkeyPatch) -> None:
    # Measured alone and together at different moments of the machine's drift, together can look faster:
    # that is noise, and 4 one-thread processes on 2 cores cannot run faster than half speed each.
    from bench.predict import compute

    monkeypatch.setattr(compute.os, "cpu_count", lambda: 2)
    timed = {1: 1.0, 2: 0.8, 4: 1.5}
    monkeypatch.setattr(compute, "_together", lambda spec, batch, n, threads, seconds: (timed[n], QUIET))
    assert compute.slowdown(None, 8, 2, 1, 0.1) == 1.0
    assert compute.slowdown(None, 8, 4, 1, 0.1) == 2.0
    timed[4] = 2.6
    assert compute.slowdown(None, 8, 4, 1, 0.1) == pytest.approx(2.6)


QUIET = Verdict(False, None, 0.01)


def test_a_disturbed_slowdown_is_measured_again_and_one_never_quiet_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 29: a calibration taken while another job used the cores said 1.905 for 2 processes (quiet: 1.015).
    from bench.predict import compute

    busy = Verdict(True, "other processes used 51% of the 2 cores during the run", 0.51)
    monkeypatch.setattr(compute.os, "cpu_count", lambda: 2)
    tries = {1: [(1.0, QUIET), (1.0, QUIET), (1.0, QUIET), (1.0, QUIET)],
             2: [(1.905, busy), (1.03, QUIET), (1.015, QUIET), (1.01, QUIET)]}
    monkeypatch.setattr(compute, "_together", lambda spec, batch, n, threads, seconds: tries[n].pop(0))
    # the median of the quiet pairs; one that believed the first pair would have kept 1.905
    assert compute.slowdown(None, 8, 2, 1, 0.1) == pytest.approx(1.015)
    assert tries == {1: [], 2: []}
    tries = {1: [(1.0, QUIET)] * 3, 2: [(1.9, busy)] * 3}
    with pytest.raises(compute.Disturbed, match="2 process.*3 pairs.*51% of the 2 cores"):
        compute.slowdown(None, 8, 2, 1, 0.1)


def test_the_slowdown_compares_each_side_with_the_other_measured_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine slows by half between the first two measurements and the rest (its drift, as the 2-core VM
    # drifts). Two processes together are 5% slower than one alone at any moment: side by side, each pair
    # says 1.05, where the quickest of the alone tries against the quickest of the later together tries
    # said 1.575.
    from bench.predict import compute

    monkeypatch.setattr(compute.os, "cpu_count", lambda: 2)
    calls: list[int] = []

    def drifting(spec: object, batch: int, n: int, threads: int, seconds: float) -> tuple[float, Verdict]:
        calls.append(n)
        drift = 1.0 if len(calls) <= 2 else 1.5
        return (1.05 if n == 2 else 1.0) * drift, QUIET

    monkeypatch.setattr(compute, "_together", drifting)
    assert compute.slowdown(None, 8, 2, 1, 0.1) == pytest.approx(1.05)
    assert calls == [1, 2] * compute.PAIRS


def test_bench_calibrate_on_a_machine_never_quiet_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from bench.commands import predict as cli

    def never_quiet(*args: object, **kwargs: object) -> None:
        raise cli.Disturbed("2 process(es) computing together were disturbed in all 3 tries (...)")

    monkeypatch.setattr(cli, "calibrate", never_quiet)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--model", "mlp", "--preset", "tiny", "--out", str(tmp_path / "cal.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "disturbed in all 3 tries" in err[0]
    assert not (tmp_path / "cal.json").exists()


def test_the_slowdown_counts_the_waits_between_steps() -> None:
    # Steps of 1 ms, and every fourth a 6 ms wait for the core after it: the mean is 2.5 ms where the
    # median step (what the calibration once kept) says 1 ms, no slowdown.
    from bench.predict.compute import mean_step_s

    ticks = iter(range(10**6))
    now = [0.0]

    def clock() -> float:
        return now[0]

    def step() -> None:
        i = next(ticks)
        now[0] += 0.001 + (0.006 if i % 4 == 3 else 0.0)

    assert mean_step_s(step, 0.1, clock) == pytest.approx(0.0025, rel=0.05)


def test_blocks_are_timed_only_at_batches_the_model_trains_on(caplog: pytest.LogCaptureFixture) -> None:
    # The cnn's last BatchNorm sees one value per channel at batch 1 and refuses to train: a sweep of 32
    # samples over 4 devices x 8 micro-batches asked the calibration for that batch, and the whole sweep died.
    import functools

    import torch

    from bench.predict.compute import compute_costs, timed_batches

    make = functools.partial(models.build_model, "cnn", "tiny", "batch")
    costs = compute_costs(make, [1, 2, 4], lambda params: torch.optim.SGD(params, lr=0.01), torch.device("cpu"), 1)
    assert "not timed at batch 1" in caplog.text
    # the lines run through batches 2 and 4 only (batch 1 is read off them)
    assert {tuple(n for n, _ in block.forward_ms.points) for block in costs.blocks} == {(2.0, 4.0)}
    assert timed_batches(costs) == [2, 4]  # what calibrate asks of the next thread count: one warning, not one each
    with pytest.raises(ValueError, match="trains at none of the batches calibration times \\(1\\)"):
        compute_costs(make, [1], lambda params: torch.optim.SGD(params, lr=0.01), torch.device("cpu"), 1)


def test_a_failed_calibration_costs_its_model_s_predictions_not_the_sweep(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from bench.harness.config import RunConfig, resolve
    from bench.predict import for_sweep

    def failing(config: object, *args: object, **kwargs: object) -> None:
        raise ValueError("Expected more than 1 value per channel when training")

    monkeypatch.setattr(for_sweep, "calibrate", failing)
    configs = [resolve(RunConfig.from_flags(model=model, preset="tiny", out=str(tmp_path / "sweep.jsonl")))
               for model in ("mlp", "cnn")]
    predictor = for_sweep.sweep_predictor("auto", configs, (2,), (4,), tmp_path / "sweep.jsonl")
    assert predictor.calibrations == {}
    assert "cnn/tiny is not predicted: its calibration failed: ValueError: Expected more than 1" in caplog.text


def test_a_sweeps_hybrid_mesh_calibrates_its_model_without_its_strategys_options() -> None:
    """`bench sweep --strategies hybrid --dp-shard 2 --tp 2` calibrated the mlp for 107 s, then dropped the file
    ("--dp-shard 2 is for hybrid, not single": single's plain steps were resolved with hybrid's degrees)."""
    from bench.harness.config import RunConfig, resolve
    from bench.predict.calibrate import calibrate

    config = resolve(RunConfig.from_flags(strategy="hybrid", model="mlp", preset="tiny", devices=4, dp_shard=2, tp=2,
                                          microbatches=1, batch_size=8))
    calibration = calibrate(config, devices=(1,), microbatches=(1,), largest=1024, repeats=1)
    assert (calibration.model, calibration.preset) == ("mlp", "tiny")
    assert calibration.fitted_runs and all('"strategy": "single"' in key for key in calibration.fitted_runs)
