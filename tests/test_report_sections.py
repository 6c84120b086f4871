"""Each report defect of issue 33, tested on the report's own output: its Markdown and the CSV beside each figure.

Every test here goes through ``build_report`` or ``load``, the interfaces the old report also had, and each
failed on the report of 4fcc3e2 (noted per test)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from reports.load import prediction_row
from tests.helpers.records import RECORDS, TIMELINE
from tests.helpers.reports import built_report, what_if_record


def test_configurations_are_counted_apart_from_their_runs(tmp_path: Path) -> None:
    # Old: "33 configuration(s) measured" for 11 configurations x 3 repeats.
    md, _ = built_report(tmp_path, RECORDS)
    assert "11 configuration(s) measured in 33 run(s)." in md


def test_prediction_row_keeps_every_figure_it_is_given() -> None:
    row = prediction_row(what_if_record("tp", 8, 2000.0, False, 0.95))
    assert row["predicted fits memory"] == "DOES NOT FIT" and row["predicted scaling efficiency"] == 0.95
    assert row["predicted samples/s per device"] == pytest.approx(250.0)
    assert row["predicted step ms"] == pytest.approx(64.0) and row["hardware"] == "H200 SXM"


def test_memory_figures_plot_tracked_memory_not_the_process_rss(tmp_path: Path) -> None:
    # Old: memory.csv held every run's peak_mem_mib_per_device, the process RSS (1,024 MiB for all).
    _, out = built_report(tmp_path, RECORDS)
    memory = pd.read_csv(out / "memory.csv").set_index("variant")
    assert "peak_mem_mib_per_device" not in memory.columns
    assert memory.loc["zero1", "mem_total_mib"] == 20 and memory.loc["fsdp (ZeRO-3)", "mem_total_mib"] == 12
    assert memory.loc["zero1", "mem_optimizer_state_mib"] == 2
    scatter = pd.read_csv(out / "throughput_vs_memory.csv").set_index("variant")
    assert list(scatter.columns) == ["panel", "devices", "samples_per_s", "mem_total_mib"]
    assert scatter.loc["fsdp (ZeRO-3)", "samples_per_s"] == pytest.approx(150.0)


def test_each_figure_writes_its_own_data(tmp_path: Path) -> None:
    # Old: memory, scaling, throughput and throughput_vs_memory CSVs byte-identical; the timeline's two flags.
    _, out = built_report(tmp_path, RECORDS)
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
