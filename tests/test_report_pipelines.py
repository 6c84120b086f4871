"""Pipelines: the bubble table and one step's timeline (reports/sections/pipelines.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from reports.load import load
from reports.sections.pipelines import bubble_table
from reports.spans import INPUT_AWAITED, INPUT_FIRST, OWN_INPUT
from tests.helpers.records import TIMELINE, record, repeated
from tests.helpers.reports import built_report


def test_measured_and_predicted_timelines_share_one_figure_and_time_axis(tmp_path: Path) -> None:
    # Old: two PNGs (pipeline_timeline and pipeline_timeline_predicted), each on its own time range.
    predicted = [{**span, "start_ms": span["start_ms"] * 2, "end_ms": span["end_ms"] * 2} for span in TIMELINE]
    runs = [{**r, "prediction": {"predicted_step_time_ms": 30.0, "predicted_timeline": predicted}}
            for r in repeated("pp", 2, 250.0, microbatches=4, measured_bubble_fraction=0.3,
                              theoretical_bubble_fraction=0.2, timeline=TIMELINE)]
    _, out = built_report(tmp_path, runs)
    assert not (out / "pipeline_timeline_predicted.png").exists()
    data = pd.read_csv(out / "pipeline_timeline.csv")
    assert data.groupby("source")["end_ms"].max().to_dict() == pytest.approx({"measured": 11.0, "PREDICTED": 22.0})


def test_the_bubble_table_takes_the_median_over_the_undisturbed_repeats(tmp_path: Path) -> None:
    bubbles = (0.2, 0.4, 0.3)
    runs = [record("pp", 2, 250.0, repeat=r, microbatches=4, measured_bubble_fraction=b,
                   theoretical_bubble_fraction=0.2, update_fraction=0.1) for r, b in enumerate(bubbles)]
    runs.append(record("pp", 2, 250.0, repeat=3, disturbed=True, microbatches=4, measured_bubble_fraction=0.9,
                       theoretical_bubble_fraction=0.2, update_fraction=0.1))
    runs += repeated("ddp", 2, 180.0)  # no bubble: not a pipeline
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    (row,) = bubble_table(load([path]).runs).to_dict("records")
    assert row == {"panel": "mlp/small", "strategy": "pp", "schedule": "gpipe", "devices": 2, "v": 1, "m": 4,
                   "bubble_theoretical": 0.2, "bubble_measured": 0.3, "update_fraction": 0.1}
    assert bubble_table(pd.DataFrame({"bubble_measured": [None]})).empty


def test_the_bubble_table_shows_how_long_ranks_took_to_start_their_actions_the_median_over_repeats(
        tmp_path: Path) -> None:
    # Two ranks, one micro-batch pair: rank 1's F1 found its input sent first and started `late` ms after it came free.
    def timeline(late: float) -> list[dict[str, object]]:
        spans = [(0, "F", 0, 0.0, 2.0), (0, "F", 1, 2.0, 4.0), (1, "F", 0, 2.5, 4.5),
                 (1, "F", 1, 4.5 + late, 6.0 + late)]
        return [{"rank": r, "stage": r, "kind": k, "microbatch": m, "start_ms": a, "end_ms": b}
                for r, k, m, a, b in spans]

    runs = [record("pp", 2, 250.0, repeat=r, microbatches=2, measured_bubble_fraction=0.3,
                   theoretical_bubble_fraction=0.2, update_fraction=0.1, timeline=timeline(late))
            for r, late in enumerate((1.0, 4.0, 2.0))]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    (row,) = bubble_table(load([path]).runs).to_dict("records")
    assert row[INPUT_FIRST] == 2.0
    assert row[OWN_INPUT] == 0.0
    assert INPUT_AWAITED not in row  # no action waited for its input in any repeat


def test_the_report_shows_the_median_bubble_of_the_repeats_not_the_first_ones(tmp_path: Path) -> None:
    # Old: the section read the configurations' rows, each the first quiet repeat's fields: 0.2 shown.
    runs = [record("pp", 2, 250.0, repeat=r, microbatches=4, measured_bubble_fraction=b,
                   theoretical_bubble_fraction=0.2, update_fraction=u)
            for r, (b, u) in enumerate(((0.2, 0.05), (0.4, 0.15), (0.3, 0.1)))]
    _, out = built_report(tmp_path, runs)
    shown = pd.read_csv(out / "bubbles.csv")
    assert shown["bubble_measured"].tolist() == [0.3] and shown["update_fraction"].tolist() == [0.1]
