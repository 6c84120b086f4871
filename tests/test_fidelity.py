"""``bench fidelity``: its verdicts, its records, and the report section they make. Nothing here times
anything: the measuring functions are replaced by fakes, so each test takes well under a second."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

import pytest

from bench import cli
from bench.experiments.baselines.plain_fsdp import plain_fsdp_step_times
from bench.experiments.fidelity import loops
from bench.experiments.fidelity.bubble import BubbleCheck, PipelineRound, bubble_checks
from bench.experiments.fidelity.loops import Comparison, fsdp_fidelity_config, fsdp_vs_plain_fsdp
from bench.experiments.fidelity.pipeline import PipelineSpeedup
from bench.experiments.fidelity.results import FidelityResult, Setup, alternate, fidelity_record, pooled_ratio, settled
from bench.harness.config import RunConfig, resolve
from bench.harness.records import RECORD_VERSION, append_record, read_records
from reports.build import FIDELITY_HINT, build_report
from reports.load import load
from strategies import ConfigError
from tests.helpers.cli import run_bench
from tests.helpers.records import FAILED

CPU2 = Setup("mlp", "small", 2, "cpu", 64)
ENV = {"hostname": "testhost", "torch": "2.14.1", "gpu_names": [], "cpu_model": "Test CPU", "cpu_cores": 2}


def single(suite_ms: float, baseline_ms: float) -> Comparison:
    return Comparison("single-vs-plain-loop", "single vs plain PyTorch loop", Setup("mlp", "tiny", 1, "cpu", 8),
                      suite_ms, baseline_ms, tolerance=0.02)


def speedup(m: int, pp_ms: float, mp_ms: float, target: float | None = 0.85) -> PipelineSpeedup:
    ideal = 2 * m / (m + 1)
    return PipelineSpeedup(f"pp vs mp, 2 stages, M={m}", CPU2, m, 1, pp_ms, mp_ms, ideal, target)


def test_the_sides_take_turns_going_first_round_by_round() -> None:
    assert alternate(["suite", "plain"], 3) == [("suite", "plain"), ("plain", "suite"), ("suite", "plain")]
    assert alternate(["pp", "mp", "mp-all"], 2) == [("pp", "mp", "mp-all"), ("mp-all", "mp", "pp")]
    assert alternate(["a", "b"], 0) == []


def test_a_ratio_is_met_within_its_tolerance_on_either_side() -> None:
    assert single(101.9, 100.0).met and single(98.1, 100.0).met
    assert not single(102.1, 100.0).met and not single(97.9, 100.0).met
    assert single(102.1, 100.0).line() == (
        "single vs plain PyTorch loop: ratio 1.021 (suite 102.10 ms, baseline 100.00 ms per step; target within 2%)"
    )


def test_the_fsdp_comparison_runs_fsdp_on_2_processes_with_sgd_and_keeps_the_resharding(tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", batch_size=8, accelerator="cpu",
                                          out=str(tmp_path / "f.jsonl")))
    fsdp = fsdp_fidelity_config(config.with_flags(optimizer="adam", lr=0.5))
    assert fsdp is not None
    assert (fsdp.strategy, fsdp.run.devices, fsdp.workload.optimizer, fsdp.workload.lr) == ("fsdp", 2, "sgd", 0.01)
    assert (fsdp.run.batch_size, fsdp.workload.model, fsdp.fsdp.reshard_after_forward) == (8, "mlp", True)
    zero2 = fsdp_fidelity_config(config.with_flags(reshard_after_forward=False))
    assert zero2 is not None and zero2.fsdp.reshard_after_forward is False
    with pytest.raises(ConfigError, match="not divisible"):
        fsdp_fidelity_config(config.with_flags(batch_size=7))


@pytest.mark.parametrize("reshard", [True, False])
def test_the_fsdp_comparison_gives_the_plain_script_the_same_resharding_and_reports_the_medians(
    reshard: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = []

    def side_by_side(config: RunConfig, rounds: int, script: object) -> tuple[list[list[float]], ...]:
        handed.append((config, rounds, script))
        return [[0.010], [0.030], [0.011]], [[0.012], [0.010], [0.050]]

    monkeypatch.setattr(loops, "_side_by_side", side_by_side)
    config = resolve(RunConfig.from_flags(strategy="fsdp", devices=2, model="mlp", preset="tiny", batch_size=8,
                                          accelerator="cpu", reshard_after_forward=reshard,
                                          out=str(tmp_path / "f.jsonl")))
    result = fsdp_vs_plain_fsdp(config, rounds=3)
    ((given, rounds, script),) = handed
    assert given is config and rounds == 3
    assert isinstance(script, functools.partial) and script.func is plain_fsdp_step_times
    assert script.keywords == {"reshard_after_forward": reshard}
    assert (result.comparison, result.name) == ("fsdp-vs-plain-fsdp", "fsdp vs plain FSDP2 script (2 processes)")
    assert (result.suite_ms, result.baseline_ms) == pytest.approx((11.0, 12.0))
    # Three rounds this different leave the verdict open: the interval spans both sides of 3%.
    assert result.interval is not None and result.interval[0] < 0.97 and result.interval[1] > 1.03
    assert result.settled is False and "[" in result.figure
    assert result.setup == Setup("mlp", "tiny", 2, "cpu", 8) and result.target == "within 3%"
    assert not result.met  # 11/12 is 8% fast
    assert dataclasses.replace(result, suite_ms=12.3).met and not dataclasses.replace(result, suite_ms=12.4).met


def test_a_pooled_ratio_pairs_the_rounds_and_its_interval_says_whether_the_rounds_settle_the_target() -> None:
    steady = [[1.00, 1.01], [1.02, 1.00], [1.01, 1.01], [1.00, 1.02]]
    ratio, interval = pooled_ratio(steady, [[1.0, 1.0]] * 4)
    assert ratio == pytest.approx(1.01) and interval is not None
    assert 1.0 <= interval[0] <= ratio <= interval[1] <= 1.02
    assert settled(interval, 0.97, 1.03) is True  # wholly inside
    assert settled(interval, 0.90, 0.99) is True  # wholly outside
    assert settled((0.98, 1.04), 0.97, 1.03) is False
    assert pooled_ratio([[1.0]], [[2.0]]) == (0.5, None) and settled(None, 0.97, 1.03) is None
    # A round whose baseline ran slow moves the interval, not just the median.
    drifting = [[1.0], [1.0], [1.0], [1.0]]
    _, wide = pooled_ratio(drifting, [[1.0], [1.0], [0.8], [1.25]])
    assert wide is not None and wide[1] - wide[0] > interval[1] - interval[0]
    with pytest.raises(ValueError, match="must pair up"):
        pooled_ratio([[1.0]], [[1.0], [1.0]])


def test_a_speedup_is_held_to_its_share_of_the_ideal_only_where_it_has_a_target() -> None:
    held = speedup(8, pp_ms=100.0, mp_ms=160.0)  # 1.6 of the ideal 16/9: 90%
    assert held.share == pytest.approx(1.6 / (16 / 9)) and held.met is True
    assert speedup(8, pp_ms=100.0, mp_ms=150.0).met is False  # 84%
    shown = speedup(8, pp_ms=100.0, mp_ms=50.0, target=None)
    assert shown.met is None and shown.target == "none (for information)"


def test_the_bubble_is_checked_only_where_m_is_at_least_4p_with_the_median_over_rounds() -> None:
    rounds = {
        4: [PipelineRound([10.0], 0.30, 0.2)] * 3,  # m < 4p with p = 2: not held to the theory
        8: [PipelineRound([10.0, 12.0], 0.15, 1 / 9), PipelineRound([11.0], 0.13, 1 / 9),
            PipelineRound([9.0], 0.40, 1 / 9)],  # an outlier round does not move the median
        16: [PipelineRound([20.0], 0.20, None)],  # a zero-bubble schedule: no theoretical figure
    }
    (check,) = bubble_checks(rounds, CPU2, "gpipe")
    assert (check.microbatches, check.measured, check.theoretical) == (8, 0.15, 1 / 9)
    assert check.pp_ms == pytest.approx(10.5)  # the median of every round's step times
    assert check.difference == pytest.approx(0.15 - 1 / 9) and check.met
    # The outlier round widens the interval past the band: the rounds do not settle the verdict.
    assert check.interval == (0.13, 0.40) and check.settled is False
    assert check.line() == (
        "pp bubble, 2 stages, M=8, gpipe: measured bubble 0.150 [0.130, 0.400] vs theoretical 0.111 "
        "(difference +0.039; target within 0.05)"
    )
    assert not BubbleCheck("b", CPU2, "gpipe", 8, 0.05, 0.111, 10.0).met  # 0.061 under the theory


def test_a_fidelity_record_names_its_figures_units_and_verdict(tmp_path: Path) -> None:
    config = RunConfig.from_flags(model="mlp", preset="tiny", steps=2, warmup=1)
    path = tmp_path / "fidelity.jsonl"
    for result in (single(103.0, 100.0), speedup(8, 100.0, 160.0), BubbleCheck("b", CPU2, "1f1b", 8, 0.2, 0.1, 9.0)):
        append_record(path, fidelity_record(result, config, rounds=3, env=ENV))
    (ratio, share, bubble), bad = read_records(path)
    assert not bad
    assert ratio["record_version"] == RECORD_VERSION and ratio["kind"] == "fidelity" and ratio["status"] == "ok"
    assert ratio["ratio"] == pytest.approx(1.03) and ratio["suite_ms"] == 103.0 and ratio["baseline_ms"] == 100.0
    assert (ratio["target"], ratio["met"], ratio["emulated"], ratio["device_count"]) == ("within 2%", False, False, 1)
    assert (ratio["rounds"], ratio["steps_per_round"], ratio["warmup_steps"], ratio["env"]) == (3, 2, 1, ENV)
    assert share["share_of_ideal"] == pytest.approx(0.9) and share["met"] is True and share["emulated"] is True
    assert (share["suite_ms"], share["baseline_ms"], share["model"], share["preset"]) == (100.0, 160.0, "mlp", "small")
    assert bubble["bubble_difference"] == pytest.approx(0.1) and bubble["met"] is False
    assert (bubble["measured_bubble_fraction"], bubble["theoretical_bubble_fraction"]) == (0.2, 0.1)
    # The figure as the report shows it, in the text the printed line is made from.
    assert ratio["figure"] == "ratio 1.030 (suite 103.00 ms, baseline 100.00 ms per step)"
    assert bubble["figure"] == "bubble 0.200 vs theoretical 0.100 (difference +0.100)"


@pytest.mark.parametrize("result", [single(103.0, 100.0), speedup(8, 100.0, 160.0),
                                    BubbleCheck("b", CPU2, "1f1b", 8, 0.2, 0.1, 9.0)])
def test_the_printed_line_is_the_name_the_figure_and_the_target(result: FidelityResult) -> None:
    figure, target = result.figure, result.target
    headline, _, detail = figure.partition(" (")
    assert result.line().startswith(f"{result.name}: ")
    assert result.line().endswith(f"{headline} ({detail[:-1]}; target {target})")


def test_an_older_record_without_its_figure_text_shows_its_figures_by_name(tmp_path: Path) -> None:
    older = fidelity_record(single(101.0, 100.0), RunConfig(), rounds=2, env=ENV)
    del older["figure"]
    path = tmp_path / "older.jsonl"
    append_record(path, older)
    (row,) = load([path]).fidelity.to_dict("records")
    assert row["measured"] == "ratio 1.01, suite_ms 101, baseline_ms 100"


@pytest.fixture
def fidelity_file(tmp_path: Path) -> Path:
    config = RunConfig.from_flags(model="mlp", preset="tiny")
    on_all_cores = dataclasses.replace(speedup(8, 100.0, 90.0, target=None), name="pp vs mp, 2 stages, M=8, all cores")
    results = [single(101.0, 100.0), speedup(8, 100.0, 150.0), on_all_cores,
               BubbleCheck("pp bubble, 2 stages, M=8, gpipe", CPU2, "gpipe", 8, 0.14, 1 / 9, 100.0)]
    path = tmp_path / "fidelity.jsonl"
    for result in results:
        append_record(path, fidelity_record(result, config, rounds=2, env=ENV))
    return path


def test_fidelity_records_are_kept_apart_from_runs(fidelity_file: Path) -> None:
    results = load([fidelity_file])
    assert results.runs.empty and results.failures.empty
    assert list(results.fidelity["met"]) == ["yes", "no", "-", "yes"]


def test_a_rerun_supersedes_the_earlier_figures_from_the_same_machine(fidelity_file: Path) -> None:
    append_record(fidelity_file, fidelity_record(single(110.0, 100.0), RunConfig(), rounds=2, env=ENV))
    rows = load([fidelity_file]).fidelity
    assert len(rows) == 4
    (again,) = rows[rows["name"] == "single vs plain PyTorch loop"].to_dict("records")
    assert again["met"] == "no" and again["measured"].startswith("ratio 1.100")


def test_the_report_shows_each_comparison_with_its_target_and_verdict(fidelity_file: Path, tmp_path: Path) -> None:
    # Only the fidelity file: no run, so no figure to draw, and the test stays fast.
    assert cli.main(["report", str(fidelity_file), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## How far to trust these numbers")[1].split("\n## ")[0]
    machine = "testhost, cpu (Test CPU, 2 cores)"
    assert (f"| single vs plain PyTorch loop | mlp/tiny | ratio 1.010 (suite 101.00 ms, baseline 100.00 ms per step) | "
            f"within 2% | yes | {machine} | False |") in section
    assert (f"| pp vs mp, 2 stages, M=8 | mlp/small | speed-up 1.50 = 84% of the ideal 1.78 (pp 100.0 ms, mp 150.0 ms "
            f"per step) | at least 85% of ideal | no | {machine} | True |") in section
    assert "| none (for information) | - |" in section
    assert (f"| pp bubble, 2 stages, M=8, gpipe | mlp/small | bubble 0.140 vs theoretical 0.111 (difference +0.029) | "
            f"within 0.05 | yes | {machine} | True |") in section
    assert "EMULATED" in section and "single vs plain loop: the `single` strategy's" in section
    assert "ddp vs plain DDP script:" not in section  # explained only where measured
    assert "fsdp vs plain FSDP2 script:" not in section
    assert FIDELITY_HINT not in md


def test_the_report_puts_the_predicted_account_of_the_gap_beside_the_measured_share(tmp_path: Path) -> None:
    from bench.predict.explain import GapStep

    steps = (GapStep("nothing: the ideal", 1.6), GapStep("the stages as split", 1.5, 80.0, 120.0),
             GapStep("runtime", 1.3, 98.0, 127.4))
    explained = dataclasses.replace(speedup(4, 100.0, 128.0), predicted=steps, prediction_source="calibration c.json")
    path = tmp_path / "fidelity.jsonl"
    append_record(path, fidelity_record(explained, RunConfig(), rounds=2, env=ENV))
    record = read_records(path)[0][0]
    assert record["predicted_speedup"] == 1.3 and record["predicted_share_of_ideal"] == pytest.approx(1.3 / 1.6)
    build_report(load([path]), tmp_path / "report")
    section = (tmp_path / "report" / "report.md").read_text().split("## How far to trust these numbers")[1]
    assert "Why pp falls short of the ideal, PREDICTED" in section
    assert "| pp vs mp, 2 stages, M=4 | the stages as split | 1.50 (predicted) | 94% (predicted) |" in section
    assert "| pp vs mp, 2 stages, M=4 | runtime | 1.30 (predicted) | 81% (predicted) |" in section
    assert "| pp vs mp, 2 stages, M=4 | measured | 1.28 | 80% |" in section  # 128 / 100 over the ideal 1.6
    assert "| pp -2.0%, mp -0.5% |" in section  # each side's full prediction against its measured step


def test_the_report_shows_and_explains_the_fsdp_comparison_where_it_was_measured(
    fidelity_file: Path, tmp_path: Path
) -> None:
    fsdp = Comparison("fsdp-vs-plain-fsdp", "fsdp vs plain FSDP2 script (2 processes)", CPU2, 102.0, 100.0,
                      tolerance=0.03)
    append_record(fidelity_file, fidelity_record(fsdp, RunConfig(), rounds=2, env=ENV))
    build_report(load([fidelity_file]), tmp_path / "report")
    section = (tmp_path / "report" / "report.md").read_text().split("## How far to trust these numbers")[1]
    assert ("| fsdp vs plain FSDP2 script (2 processes) | mlp/small | ratio 1.020 (suite 102.00 ms, baseline 100.00 ms "
            "per step) | within 3% | yes | testhost, cpu (Test CPU, 2 cores) | True |") in section
    assert "fsdp vs plain FSDP2 script: the `fsdp` strategy on 2 processes over the FSDP2 tutorial's" in section


def test_without_fidelity_records_the_report_says_how_to_make_them(tmp_path: Path) -> None:
    runs = tmp_path / "sweep.jsonl"
    runs.write_text(json.dumps(FAILED) + "\n")  # a row without a measurement: nothing to draw
    build_report(load([runs]), tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"## How far to trust these numbers\n\n{FIDELITY_HINT}\n" in md
    assert "python -m bench fidelity --out results/fidelity.jsonl" in FIDELITY_HINT


def _no_measuring(*args: object, **kwargs: object) -> None:
    raise AssertionError("bad input must stop bench fidelity before anything is measured")


UNWRITABLE = [
    pytest.param("file", id="under-a-file"),
    pytest.param("/nonexistent-root-dir", id="under-root",
                 marks=pytest.mark.skipif(os.geteuid() == 0, reason="root may create /nonexistent-root-dir")),
]


@pytest.mark.parametrize("parent", UNWRITABLE)
def test_an_unwritable_out_fails_in_one_line_before_anything_runs(
    parent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if parent == "file":
        (tmp_path / "a_file").write_text("")
        parent = str(tmp_path / "a_file")
    out = Path(parent) / "x.jsonl"
    monkeypatch.setattr(cli, "single_vs_plain_loop", _no_measuring)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fidelity", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"bench fidelity: error: --out {out}: cannot write in ")
    assert not out.exists()


def test_a_calibration_that_is_not_a_file_fails_in_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "single_vs_plain_loop", _no_measuring)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fidelity", "--calibration", str(tmp_path / "none.json"), "--out", str(tmp_path / "f.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "no such file (or auto, none)" in err
    assert not (tmp_path / "f.jsonl").exists()


def test_the_command_prints_each_result_and_appends_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bubble = BubbleCheck("pp bubble, 2 stages, M=8, gpipe", CPU2, "gpipe", 8, 0.3, 1 / 9, 100.0)
    ddp = Comparison("ddp-vs-plain-ddp", "ddp vs plain DDP script (2 processes)", CPU2, 99.0, 100.0, tolerance=0.03)
    fsdp = Comparison("fsdp-vs-plain-fsdp", "fsdp vs plain FSDP2 script (2 processes)", CPU2, 104.0, 100.0,
                      tolerance=0.03)
    given = []
    monkeypatch.setattr(cli, "single_vs_plain_loop", lambda config, rounds: single(100.0, 100.0))
    monkeypatch.setattr(cli, "ddp_vs_plain_ddp", lambda config, rounds: ddp)
    monkeypatch.setattr(cli, "fsdp_vs_plain_fsdp", lambda config, rounds: given.append((config, rounds)) or fsdp)
    monkeypatch.setattr(cli, "pp_vs_mp", lambda config, rounds, predictor: predictors.append(predictor) or (
        [speedup(8, 100.0, 160.0)], [bubble]))
    predictors: list[object] = []
    out = tmp_path / "fid.jsonl"
    assert cli.main(["fidelity", "--model", "mlp", "--preset", "tiny", "--rounds", "2", "--calibration", "none",
                     "--out", str(out)]) == 0
    assert predictors == [None]  # --calibration none: no account of the gap, and nothing calibrated
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2] == bubble.line() and printed[-3] == speedup(8, 100.0, 160.0).line()
    assert printed[-4] == fsdp.line() and printed[-5] == ddp.line()
    assert printed[-1] == f"fidelity: 3 of 5 targets met  -> {out}"
    ((config, rounds),) = given  # the fsdp side's configuration, as fsdp_fidelity_config makes it
    assert (config.strategy, config.run.devices, rounds) == ("fsdp", 2, 2)
    assert (config.workload.optimizer, config.workload.lr) == ("sgd", 0.01)
    records, _ = read_records(out)
    assert [r["comparison"] for r in records] == [
        "single-vs-plain-loop", "ddp-vs-plain-ddp", "fsdp-vs-plain-fsdp", "pp-vs-mp", "pp-bubble"]
    assert [r["met"] for r in records] == [True, True, False, True, False]
    assert all(r["rounds"] == 2 and r["env"]["hostname"] for r in records)


COMMON_FIELDS = {"record_version", "kind", "status", "timestamp", "comparison", "name", "target", "met", "figure",
                 "model", "preset", "device_count", "accelerator", "global_batch_size", "emulated", "rounds",
                 "steps_per_round", "warmup_steps", "env", "settled"}
FIGURE_FIELDS = {
    "single-vs-plain-loop": {"ratio", "ratio_interval", "suite_ms", "baseline_ms"},
    "ddp-vs-plain-ddp": {"ratio", "ratio_interval", "suite_ms", "baseline_ms"},
    "fsdp-vs-plain-fsdp": {"ratio", "ratio_interval", "suite_ms", "baseline_ms"},
    "pp-vs-mp": {"speedup", "ideal_speedup", "share_of_ideal", "speedup_interval", "share_of_ideal_interval",
                 "suite_ms", "baseline_ms", "microbatches", "mp_microbatches", "mp_threads", "predicted_speedup",
                 "predicted_share_of_ideal", "predicted_steps", "prediction_source"},
    "pp-bubble": {"measured_bubble_fraction", "theoretical_bubble_fraction", "bubble_difference",
                  "measured_bubble_interval", "microbatches", "schedule", "suite_ms"},
}


@pytest.mark.alone
@pytest.mark.distributed
def test_the_real_comparisons_run_once_on_a_tiny_model_and_fill_every_field(tmp_path: Path) -> None:
    # Nothing faked: the suite's strategies against the hand-written loops, 1 round, the tiny mlp.
    out = tmp_path / "fid.jsonl"
    # 6 timed steps: the median of 2 sub-millisecond steps is their mean, and one hiccup of the machine
    # then moved a ratio past 5 (seen on torch 2.11).
    proc = run_bench("fidelity", "--model", "mlp", "--preset", "tiny", "--rounds", "1", "--steps", "6",
                     "--warmup", "1", "--calibration", "none", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records, bad = read_records(out)
    assert bad == [] and [r["comparison"] for r in records] == [
        "single-vs-plain-loop", "ddp-vs-plain-ddp", "fsdp-vs-plain-fsdp", "pp-vs-mp", "pp-vs-mp", "pp-vs-mp",
        "pp-vs-mp", "pp-bubble"]
    for record in records:
        assert set(record) == COMMON_FIELDS | FIGURE_FIELDS[record["comparison"]], record["comparison"]
        assert record["kind"] == "fidelity" and record["status"] == "ok" and record["rounds"] == 1
        assert record["model"] == "mlp" and record["accelerator"] == "cpu"
        assert record["met"] in (True, False, None) and record["figure"].split(" (")[0] in proc.stdout
        assert record["emulated"] is (record["device_count"] > 1)
        assert all(record[f] > 0 for f in ("suite_ms", "global_batch_size"))
    fsdp = records[2]
    assert (fsdp["name"], fsdp["device_count"], fsdp["target"]) == (
        "fsdp vs plain FSDP2 script (2 processes)", 2, "within 3%")
    assert fsdp["met"] is (abs(fsdp["ratio"] - 1) <= 0.03) and fsdp["ratio"] == pytest.approx(
        fsdp["suite_ms"] / fsdp["baseline_ms"])
    ratios = [r["ratio"] for r in records if "ratio" in r]
    # Sub-millisecond steps on 2 busy cores: only a sane ratio here, within an order of magnitude. The tiny mlp's
    # ddp against plain DDP read 0.32-0.36 in three quiet runs and 0.72 and 2.88 in two of the code before
    # (c7e7d9b): gloo's latencies on shared cores, not the harness. The 2% target itself, and a baseline doing
    # half or double the work missing it, are checked on a sleeping model (tests/test_fidelity_loops.py).
    assert all(0.1 < ratio < 10 for ratio in ratios), ratios
    bubble = records[-1]
    assert 0 <= bubble["measured_bubble_fraction"] < 1 and bubble["theoretical_bubble_fraction"] == pytest.approx(1 / 9)


def test_fidelity_offers_only_the_options_its_comparisons_take() -> None:
    fidelity = cli.build_parser()._subparsers._group_actions[0].choices["fidelity"]  # noqa: SLF001
    flags = {flag for action in fidelity._actions for flag in action.option_strings}  # noqa: SLF001
    assert {"--model", "--preset", "--rounds", "--reshard-after-forward", "--no-reshard-after-forward"} <= flags
    # Each comparison fixes its strategy's options: offering them would only lead to "is for ddp, not single".
    assert not flags & {"--static-graph", "--dp", "--pp", "--microbatches", "--schedule", "--bucket-cap-mb",
                        "--sync-batchnorm", "--balance", "--precision", "--save-checkpoint", "--profile"}
