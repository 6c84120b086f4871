"""Each report defect of issue 33, tested on the report's own output: its Markdown and the CSV beside each figure.

Every test here goes through ``build_report`` or ``load``, the interfaces the old report also had, and each
failed on the report of 4fcc3e2 (noted per test)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.records import RECORD_VERSION
from reports.build import build_report
from reports.load import load, prediction_row
from tests.helpers.records import RECORDS, TIMELINE, record, repeated

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "example-cpu-2core"


def _report(tmp_path: Path, records: list[dict]) -> tuple[str, Path]:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "report"
    build_report(load([path]), out)
    return (out / "report.md").read_text(), out


def _what_if(strategy: str, devices: int, samples_per_s: float, fits: bool, efficiency: float) -> dict:
    return {"record_version": RECORD_VERSION, "kind": "prediction", "status": "ok", "strategy": strategy,
            "model": "transformer", "preset": "large", "device_count": devices, "global_batch_size": 16 * devices,
            "predicted_step_time_ms": 16 * devices / samples_per_s * 1e3, "predicted_samples_per_s": samples_per_s,
            "compute_source": "roofline from a data sheet", "hardware": "H200 SXM",
            "predicted_fits_memory": fits, "predicted_scaling_efficiency": efficiency,
            "predicted_memory_by_kind": {"total": (438256 if not fits else 60000) * 2**20},
            "config": {"strategy": strategy, "microbatches": 1, "schedule": "gpipe"}}


def test_configurations_are_counted_apart_from_their_runs(tmp_path: Path) -> None:
    # Old: "33 configuration(s) measured" for 11 configurations x 3 repeats.
    md, _ = _report(tmp_path, RECORDS)
    assert "11 configuration(s) measured in 33 run(s)." in md


def test_what_if_keeps_fits_memory_and_efficiency_and_never_recommends_what_does_not_fit(tmp_path: Path) -> None:
    # Old: prediction_row dropped predicted_fits_memory and predicted_scaling_efficiency (tp on 8 H200s shown at
    # 438,256 MiB per device with no word that it does not fit).
    md, out = _report(tmp_path, [_what_if("tp", 8, 2000.0, False, 0.95), _what_if("ddp", 8, 1500.0, True, 0.9)])
    table = pd.read_csv(out / "what_if.csv").set_index("variant")
    assert table.loc["tp", "predicted fits memory"] == "DOES NOT FIT"
    assert table.loc["ddp", "predicted scaling efficiency"] == pytest.approx(0.9)
    assert table.loc["tp", "predicted MiB per device"] == pytest.approx(438256)
    assert "8 x H200 SXM, transformer/large: ddp" in md  # tp is faster but does not fit
    assert "PREDICTED, transformer/large on 8 x H200 SXM: **ddp**" in md


def test_prediction_row_keeps_every_figure_it_is_given() -> None:
    row = prediction_row(_what_if("tp", 8, 2000.0, False, 0.95))
    assert row["predicted fits memory"] == "DOES NOT FIT" and row["predicted scaling efficiency"] == 0.95
    assert row["predicted samples/s per device"] == pytest.approx(250.0)
    assert row["predicted step ms"] == pytest.approx(64.0) and row["hardware"] == "H200 SXM"


def test_a_verify_row_run_on_fewer_devices_is_not_a_pass(tmp_path: Path) -> None:
    # Old: "dp x2 passed" though verify ran it on one device.
    verify = {"record_version": RECORD_VERSION, "kind": "verify", "strategy": "ddp", "model": "mlp", "devices": 2,
              "max_param_diff": 0.0, "max_loss_diff": 0.0, "passed": True, "norm": "group", "schedule": "gpipe",
              "microbatches": 1, "precision": "fp32", "reason": "ran on 1 device(s), not 2"}
    md, _ = _report(tmp_path, [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0), verify])
    assert "not checked on 2 devices: ran on 1 device(s), not 2" in md
    assert "verified against single" not in md  # ddp x2 is not verified by a 1-device run


def test_memory_figures_plot_tracked_memory_not_the_process_rss(tmp_path: Path) -> None:
    # Old: memory.csv held every run's peak_mem_mib_per_device, the process RSS (1,024 MiB for all).
    _, out = _report(tmp_path, RECORDS)
    memory = pd.read_csv(out / "memory.csv").set_index("variant")
    assert "peak_mem_mib_per_device" not in memory.columns
    assert memory.loc["zero1", "mem_total_mib"] == 20 and memory.loc["fsdp (ZeRO-3)", "mem_total_mib"] == 12
    assert memory.loc["zero1", "mem_optimizer_state_mib"] == 2
    scatter = pd.read_csv(out / "throughput_vs_memory.csv").set_index("variant")
    assert list(scatter.columns) == ["panel", "devices", "samples_per_s", "mem_total_mib"]
    assert scatter.loc["fsdp (ZeRO-3)", "samples_per_s"] == pytest.approx(150.0)


def test_each_figure_writes_its_own_data(tmp_path: Path) -> None:
    # Old: memory, scaling, throughput and throughput_vs_memory CSVs byte-identical; the timeline's two flags.
    _, out = _report(tmp_path, RECORDS)
    texts = [(out / f"{n}.csv").read_text() for n in ("memory", "scaling", "throughput", "throughput_vs_memory")]
    assert len(set(texts)) == 4
    throughput = pd.read_csv(out / "throughput.csv")
    assert list(throughput.columns) == ["panel", "variant", "strategy", "devices", "global_batch", "samples_per_s",
                                        "samples_per_s_low", "samples_per_s_high"]
    ddp = throughput[(throughput["variant"] == "ddp") & (throughput["panel"] == "mlp/small")].iloc[0]
    assert ddp["samples_per_s"] == pytest.approx(180.0) and ddp["samples_per_s_low"] < 180 < ddp["samples_per_s_high"]
    scaling = pd.read_csv(out / "scaling.csv").set_index(["panel", "variant"])
    assert scaling.loc[("mlp/small", "ddp"), "speedup"] == pytest.approx(1.8)
    assert scaling.loc[("mlp/small", "ddp"), "efficiency"] == pytest.approx(0.9)
    timeline = pd.read_csv(out / "pipeline_timeline.csv")
    assert len(timeline) == len(TIMELINE) and set(timeline["kind"]) == {"F", "B"}
    assert timeline["end_ms"].max() == pytest.approx(max(s["end_ms"] for s in TIMELINE))
    bubbles = pd.read_csv(out / "bubbles.csv").set_index("m")
    assert bubbles.loc[4, "bubble_measured"] == pytest.approx(0.3) and bubbles.loc[8, "bubble_theoretical"] == \
        pytest.approx(1 / 9, abs=1e-3)


def test_measured_and_predicted_timelines_share_one_figure_and_time_axis(tmp_path: Path) -> None:
    # Old: two PNGs (pipeline_timeline and pipeline_timeline_predicted), each on its own time range.
    predicted = [{**span, "start_ms": span["start_ms"] * 2, "end_ms": span["end_ms"] * 2} for span in TIMELINE]
    runs = [{**r, "prediction": {"predicted_step_time_ms": 30.0, "predicted_timeline": predicted}}
            for r in repeated("pp", 2, 250.0, microbatches=4, measured_bubble_fraction=0.3,
                              theoretical_bubble_fraction=0.2, timeline=TIMELINE)]
    _, out = _report(tmp_path, runs)
    assert not (out / "pipeline_timeline_predicted.png").exists()
    data = pd.read_csv(out / "pipeline_timeline.csv")
    assert data.groupby("source")["end_ms"].max().to_dict() == pytest.approx({"measured": 11.0, "PREDICTED": 22.0})


def test_the_prediction_error_in_the_csv_is_the_one_the_report_shows(tmp_path: Path) -> None:
    # Old: a CSV's prediction_error was the first repeat's (the record's own), not the median's the report shows.
    runs = [{**r, "prediction": {"predicted_step_time_ms": 700.0}, "prediction_error": 700.0 / r["step_time_ms_median"]
             - 1} for r in [record("ddp", 2, sps, repeat=i) for i, sps in enumerate((80.0, 100.0, 120.0))]]
    md, out = _report(tmp_path, [*repeated("single", 1, 100.0), *runs])
    median_ms = statistics.median(r["step_time_ms_median"] for r in runs)
    shown = 700.0 / median_ms - 1
    found = 0
    for csv in out.glob("*.csv"):
        data = pd.read_csv(csv)
        for column in ("prediction_error", "error"):
            if column in data:
                found += 1
                assert data[column].dropna().tolist() == pytest.approx([shown]), csv.name
    assert found >= 1 and f"| {round(shown, 3):.3g} |" in md


def test_one_repeat_shows_no_interval(tmp_path: Path) -> None:
    # Old: the run's own step-time quartiles in brackets, labelled a 95% bootstrap interval over repeats.
    md, out = _report(tmp_path, [record("single", 1, 100.0), record("ddp", 2, 180.0)])
    assert "180.0 [" not in md and "| 180.0 |" in md
    assert pd.read_csv(out / "throughput.csv")["samples_per_s_low"].isna().all()


def test_single_is_the_reference_not_a_pass_when_no_verify_file_was_read(tmp_path: Path) -> None:
    # Old: one `bench run` of single said "verified: pass" with no verify file read.
    md, _ = _report(tmp_path, [record("single", 1, 100.0)])
    assert "| reference |" in md and "| pass |" not in md


def test_pass_through_dp_on_cpu_is_never_ranked_fastest(tmp_path: Path) -> None:
    # Old: the benchmark matrix's dp on 1 CPU device ranked "fastest" over single.
    md, _ = _report(tmp_path, [*repeated("single", 1, 100.0), *repeated("dp", 1, 150.0)])
    assert "**mlp/small on 1 device(s), batch 64**: use **single**" in md


def test_the_report_says_why_speed_up_and_samples_per_s_can_order_differently(tmp_path: Path) -> None:
    # Old: pp 435.2 samples/s at 0.30x and ddp 433.2 at 0.42x, with no word why.
    md, _ = _report(tmp_path, RECORDS)
    assert "which cancels the drift between rounds (so it can order rows differently from samples/s)" in md


def test_the_example_report_is_under_2000_words_before_its_appendix_with_one_banner(tmp_path: Path) -> None:
    # Old: 4,590 words, the EMULATED paragraph 6 times.
    from reports.render import body_words

    files = [EXAMPLE / f"{n}.jsonl" for n in ("sweep", "verify", "fidelity", "what_if", "plan")]
    out = tmp_path / "example"
    build_report(load(files), out)
    md = (out / "report.md").read_text()
    assert 300 < body_words(md) <= 2000
    assert md.count("EMULATED devices:") == 1 and md.index("## Verdict") < 400
    assert md.count("achievable shares of NVIDIA H200 data sheet") == 1  # the source said once


def test_the_throughput_table_shows_the_bytes_each_rank_communicates_per_step(tmp_path: Path) -> None:
    ddp = [dict(r, comm_bytes_per_step_mean=3 * 2**20) for r in repeated("ddp", 2, 90.0)]
    md, _ = _report(tmp_path, repeated("single", 1, 100.0) + ddp)
    header, single, two = (line for line in md.splitlines() if line.startswith(("| panel | devices", "| mlp/small")))
    column = [c.strip() for c in header.split("|")].index("comm MiB/step")
    assert [c.strip() for c in two.split("|")][column] == "3"
    assert [c.strip() for c in single.split("|")][column] == ""  # one process: nothing counted
    assert "comm MiB/step" in md


def test_predicted_memory_and_bubbles_are_scored_against_what_the_runs_measured(tmp_path: Path) -> None:
    from tests.helpers.records import tracked

    measured = tracked(parameters=32, gradients=32, optimizer_state=32, total=128)
    predicted = {"parameters": 32 * 2**20, "gradients": 32 * 2**20, "optimizer_state": 32 * 2**20,
                 "activations": 16 * 2**20, "total": 112 * 2**20}  # 12.5% under the tracker's total
    ddp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_memory_by_kind": predicted})
           for r in repeated("ddp", 2, 90.0, memory_by_kind=measured)]
    pp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_bubble": 0.30})
          for r in repeated("pp", 2, 90.0, microbatches=4, measured_bubble_fraction=0.20)]
    md, _ = _report(tmp_path, repeated("single", 1, 100.0) + ddp + pp)
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "total |error| median 12.5%" in scores
    assert "0 of 1 within 0.05" in scores  # 0.30 predicted against 0.20 measured
    assert md.index("## Appendix") < md.index("## Predicted memory and bubbles")
