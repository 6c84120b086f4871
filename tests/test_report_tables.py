"""Verification status, the fastest per panel and hybrid against its parts (reports/tables.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.records import RECORD_VERSION
from reports.load import load
from reports.scaling import with_scaling
from reports.tables import fastest, with_verification
from tests.helpers.records import VERIFY, record, repeated
from tests.helpers.reports import built_report, results_jsonl


def test_hybrid_efficiency_is_held_against_the_product_of_its_parts(results_file: Path) -> None:
    from reports.tables import hybrid_vs_parts

    (row,) = hybrid_vs_parts(with_scaling(load([results_file]).runs)[0]).to_dict("records")
    # hybrid 300 on 4 devices: efficiency 0.75; ddp 180 on 2: 0.9; pp (gpipe, m=4) 250 on 2: 1.25.
    assert row["efficiency"] == pytest.approx(0.75)
    assert row["ddp_efficiency"] == pytest.approx(0.9) and row["pp_efficiency"] == pytest.approx(1.25)
    assert row["vs_product_of_parts"] == pytest.approx(0.75 / (0.9 * 1.25))


def test_a_strategy_shown_wrong_never_wins_the_summary(results_file: Path) -> None:
    results = load([results_file])
    runs = with_verification(with_scaling(results.runs)[0], results.verify)
    best = fastest(runs).set_index(["panel", "devices"])
    # pp with 4 micro-batches is the fastest at 2 devices, but verify found it wrong; ddp's interval
    # (178-182 samples/s) clears the runner-up's (pp with 8 micro-batches, 139-141).
    assert best.loc[("mlp/small", 2), "fastest"] == "ddp"
    assert best.loc[("mlp/small", 2), "speedup"] == "1.80 [1.80, 1.80]"
    assert best.loc[("mlp/small", 2), "verified"] == "pass"
    assert best.loc[("cnn/small", 2), "verified"] == "not verified"
    assert best.loc[("mlp/small", 1), "fastest"] == "single (the only one measured)"


def test_fastest_names_no_winner_within_noise(tmp_path: Path) -> None:
    close = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 150.0),
             *[record("mp", 2, sps, repeat=r) for r, sps in enumerate((148.0, 152.0, 151.0))],
             *[record("pp", 2, sps, repeat=r) for r, sps in enumerate((120.0, 125.0, 122.0))]]
    path = tmp_path / "close.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in close))
    runs = with_verification(with_scaling(load([path]).runs)[0], load([path]).verify)
    (row,) = fastest(runs[runs["devices"] == 2]).to_dict("records")
    assert row["fastest"] == "tie (within noise): mp (m=1), ddp"  # pp's interval is clear below both
    assert row["winners"] == ("mp (m=1)", "ddp")


def test_one_run_gives_no_interval_and_no_ranking(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (record("single", 1, 100.0), record("ddp", 2, 180.0),
                                                           record("mp", 2, 90.0))))
    runs = with_verification(with_scaling(load([path]).runs)[0], load([path]).verify)
    (row,) = fastest(runs[runs["devices"] == 2]).to_dict("records")
    assert row["fastest"] == "not ranked: fewer than 2 repeats (fastest median: ddp)"
    assert row["winners"] == ("ddp",)
    assert row["speedup"] == "1.80"  # a ratio of one run each: no interval to show


def test_verified_means_the_class_verify_checked_and_says_why_otherwise(tmp_path: Path) -> None:
    rows = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0, model="cnn", norm="batch"),
            *repeated("fsdp", 2, 170.0, model="cnn", norm="batch"),
            *repeated("tp", 2, 150.0, model="cnn", norm="batch"),
            *repeated("dp", 2, 100.0), *repeated("pp", 2, 140.0, microbatches=8), *repeated("mp", 2, 90.0)]
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, *VERIFY]))
    results = load([path])
    runs = with_verification(with_scaling(results.runs)[0], results.verify).set_index("variant")
    assert runs.loc["ddp", "verified"] == "not exact: batch-split BatchNorm"  # cnn with BatchNorm, split batch
    # The strategy says whether it splits the batch: fsdp shards it like ddp (a name list once left it out); tp's
    # ranks each see the whole batch.
    assert runs.loc["fsdp (ZeRO-3)", "verified"] == "not exact: batch-split BatchNorm"
    assert runs.loc["tp", "verified"] == "not verified"
    assert runs.loc["dp", "verified"] == "not checked: pass-through on CPU"
    assert runs.loc["pp (gpipe, m=8)", "verified"] == "not verified"  # verify checked m=4, not 8
    assert runs.loc["mp (m=1)", "verified"] == "pass"


def test_a_hybrid_verdict_covers_its_mesh_only(tmp_path: Path) -> None:
    # verify checked dp x pp (2 x 2) and dp-shard x tp; a hybrid run on dp-shard x pp was not checked.
    mesh = {"dp": 2, "dp_shard": 1, "pp": 2, "tp": 1}
    rows = [*repeated("single", 1, 100.0), *repeated("hybrid", 4, 300.0, microbatches=4, **mesh),
            *repeated("hybrid", 4, 280.0, microbatches=4, dp=1, dp_shard=2, pp=2, tp=1)]
    rows[-3:] = [{**r, "config": {**r["config"], "dp_shard": 2}} for r in rows[-3:]]  # tells the variants apart
    verify = [{"record_version": RECORD_VERSION, "kind": "verify", "strategy": "hybrid", "model": "mlp", "devices": 4,
               "max_param_diff": 0.0, "max_loss_diff": 0.0, "passed": True, "norm": "group", "schedule": "gpipe",
               "microbatches": 4, "precision": "fp32", **degrees}
              for degrees in (mesh, {"dp": 1, "dp_shard": 2, "pp": 1, "tp": 2})]
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, *verify]))
    results = load([path])
    runs = with_verification(with_scaling(results.runs)[0], results.verify).set_index("variant")
    assert runs.loc["hybrid (gpipe, m=4)", "verified"] == "pass"
    assert runs.loc["hybrid (dp-shard=2, gpipe, m=4)", "verified"] == "not verified"


def test_a_configuration_left_with_one_run_is_held_to_a_fastest_that_has_repeats(tmp_path: Path) -> None:
    # The target sweep's panels went unranked whenever one configuration had a single quiet run left.
    path = tmp_path / "mixed.jsonl"
    runs = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0), record("mp", 2, 90.0),
            record("fsdp", 2, 179.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    table = with_verification(with_scaling(load([path]).runs)[0], load([path]).verify)
    (row,) = fastest(table[table["devices"] == 2]).to_dict("records")
    assert row["winners"] == ("ddp", "fsdp (ZeRO-3)")  # its one run reaches ddp's interval; mp's does not
    assert row["fastest"] == "tie (within noise): ddp, fsdp (ZeRO-3) (2 of 3 held to it by one run)"


def test_a_panel_whose_runs_were_all_disturbed_is_not_ranked_beside_one_that_ranks(tmp_path: Path) -> None:
    from reports.scaling import with_scaling
    from reports.tables import fastest, with_verification

    rows = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0),
            *[record("ddp", 2, 90.0, model="cnn", repeat=r, disturbed=True) for r in range(2)]]
    results = load([results_jsonl(tmp_path, rows)])
    table = fastest(with_verification(with_scaling(results.runs)[0], results.verify)).set_index(["panel", "devices"])
    assert table.loc[("cnn/small", 2), "fastest"].startswith("not ranked: every run was disturbed")
    assert table.loc[("cnn/small", 2), "winners"] == ()
    assert table.loc[("mlp/small", 2), "fastest"] == "ddp (the only one measured)"


def test_single_is_the_reference_not_a_pass_when_no_verify_file_was_read(tmp_path: Path) -> None:
    # Old: one `bench run` of single said "verified: pass" with no verify file read.
    md, _ = built_report(tmp_path, [record("single", 1, 100.0)])
    assert "| reference |" in md and "| pass |" not in md


def test_pass_through_dp_on_cpu_is_never_ranked_fastest(tmp_path: Path) -> None:
    # Old: the benchmark matrix's dp on 1 CPU device ranked "fastest" over single.
    md, _ = built_report(tmp_path, [*repeated("single", 1, 100.0), *repeated("dp", 1, 150.0)])
    assert "**mlp/small on 1 device(s), batch 64**: use **single**" in md
