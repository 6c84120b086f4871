"""Throughput and scaling: the table of every configuration and its figures (reports/sections/throughput.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch

import models
from reports.sections.throughput import mesh, parameters
from tests.helpers.records import RECORDS, record, repeated
from tests.helpers.reports import built_report


def test_one_repeat_shows_no_interval(tmp_path: Path) -> None:
    # Old: the run's own step-time quartiles in brackets, labelled a 95% bootstrap interval over repeats.
    md, out = built_report(tmp_path, [record("single", 1, 100.0), record("ddp", 2, 180.0)])
    assert "180.0 [" not in md and "| 180.0 |" in md
    assert pd.read_csv(out / "throughput.csv")["samples_per_s_low"].isna().all()


def test_the_report_says_why_speed_up_and_samples_per_s_can_order_differently(tmp_path: Path) -> None:
    # Old: pp 435.2 samples/s at 0.30x and ddp 433.2 at 0.42x, with no word why.
    md, _ = built_report(tmp_path, RECORDS)
    assert "which cancels the drift between rounds (so it can order rows differently from samples/s)" in md


def test_the_throughput_table_shows_the_bytes_each_rank_communicates_per_step(tmp_path: Path) -> None:
    ddp = [dict(r, comm_bytes_per_step_mean=3 * 2**20) for r in repeated("ddp", 2, 90.0)]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + ddp)
    header, single, two = (line for line in md.splitlines() if line.startswith(("| panel | devices", "| mlp/small")))
    column = [c.strip() for c in header.split("|")].index("comm MiB/step")
    assert [c.strip() for c in two.split("|")][column] == "3"
    assert [c.strip() for c in single.split("|")][column] == ""  # one process: nothing counted
    assert "comm MiB/step" in md


def test_the_mesh_column_reads_each_degree_the_run_recorded_and_fills_dp_from_the_devices() -> None:
    assert mesh({"devices": 1, "fields": {}}) == "1 x 1 x 1"
    assert mesh({"devices": 4, "fields": None}) == "4 x 1 x 1"  # ddp on 4: every device a data-parallel rank
    assert mesh({"devices": 4, "fields": {"stages": 2}}) == "2 x 2 x 1"  # pp records its stages
    assert mesh({"devices": 8, "fields": {"pp": 2, "tp": 2}}) == "2 x 2 x 2"
    assert mesh({"devices": 8, "fields": {"dp": 1, "pp": 2, "tp": 2}}) == "1 x 2 x 2"  # a recorded dp is kept


def test_parameters_are_the_models_own_count_and_nan_for_a_model_the_suite_cannot_build() -> None:
    with torch.device("meta"):
        spec = models.build_model("mlp", "small")
    assert parameters("mlp", "small") == sum(p.numel() for p in spec.blocks.parameters())
    assert math.isnan(parameters("no-such-model", "small"))
