"""The report, built from a small fixed set of records: figures exist, tables hold the right numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.records import RECORD_VERSION
from reports.build import build_report
from reports.load import load
from reports.scaling import with_scaling
from reports.sections.throughput import table as results_table
from reports.tables import fastest, with_verification
from tests.helpers.records import FAILED, RECORDS, VERIFY, record, repeated


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.jsonl"
    lines = [json.dumps(r) for r in [*RECORDS, FAILED, *VERIFY]]
    lines.insert(3, '{"record_version": 1, "status": "ok", "strat')  # a torn line: line 4
    path.write_text("\n".join(lines) + "\n")
    return path


def test_speedup_and_efficiency_are_against_single_on_one_device(results_file: Path) -> None:
    runs, _ = with_scaling(load([results_file]).runs)
    ddp = runs[(runs["strategy"] == "ddp") & (runs["model"] == "mlp")].iloc[0]
    assert ddp["speedup"] == pytest.approx(1.8) and ddp["efficiency"] == pytest.approx(0.9)
    cnn = runs[(runs["strategy"] == "ddp") & (runs["model"] == "cnn")].iloc[0]
    assert cnn["speedup"] == pytest.approx(1.9)


def test_without_single_at_a_batch_the_smallest_device_count_that_ran_it_is_the_baseline_and_says_so(
    tmp_path: Path,
) -> None:
    # single ran out of memory at this batch (no ok record); ddp and mp ran on 2 devices, ddp on 4.
    runs = [*repeated("ddp", 2, 100.0), *repeated("mp", 2, 80.0), *repeated("ddp", 4, 180.0)]
    path = tmp_path / "no_single.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    combined, _ = with_scaling(load([path]).runs)
    rows = combined.set_index(["variant", "devices"])
    four = rows.loc[("ddp", 4)]
    assert four["speedup"] == pytest.approx(1.8) and four["efficiency"] == pytest.approx(0.9)  # 1.8 on 2x devices
    assert four["baseline"].startswith("ddp on 2 device(s): no single run at this batch")
    assert rows.loc[("mp (m=1)", 2), "speedup"] == pytest.approx(0.8)
    assert rows.loc[("ddp", 2), "speedup"] == pytest.approx(1.0)
    table = results_table(with_verification(combined, load([path]).verify))
    assert "baseline" in table.columns  # shown wherever a row is not against single


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


def test_a_disturbed_run_is_left_out_of_its_configurations_figures(tmp_path: Path) -> None:
    runs = [*repeated("single", 1, 100.0), *repeated("ddp", 2, 180.0),
            record("ddp", 2, 900.0, repeat=3, disturbed=True)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    combined, _ = with_scaling(load([path]).runs)
    ddp = combined[combined["strategy"] == "ddp"].iloc[0]
    assert ddp["samples_per_s"] == pytest.approx(180.0) and ddp["repeats"] == 3 and ddp["disturbed_runs"] == 1


def test_one_run_gives_no_interval_and_no_ranking(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (record("single", 1, 100.0), record("ddp", 2, 180.0),
                                                           record("mp", 2, 90.0))))
    runs = with_verification(with_scaling(load([path]).runs)[0], load([path]).verify)
    (row,) = fastest(runs[runs["devices"] == 2]).to_dict("records")
    assert row["fastest"] == "not ranked: fewer than 2 repeats (fastest median: ddp)"
    assert row["winners"] == ("ddp",)
    assert row["speedup"] == "1.80"  # a ratio of one run each: no interval to show


def test_report_writes_every_figure_and_both_pages(results_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = build_report(load([results_file]), out)
    names = {p.name for p in written}
    assert names == {"report.md", "report.html", "throughput.png", "scaling.png", "memory.png",
                     "throughput_vs_memory.png", "bubbles.png", "pipeline_timeline.png", "breakdown.png"}
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert png.with_suffix(".csv").stat().st_size > 0, f"{png.name} has no data beside it"
    md = (out / "report.md").read_text()
    assert md.index("## Verdict") < md.index("## Throughput and scaling")  # the decision first
    # The speed/memory frontier, on tracked memory.
    assert "| mlp/small | 2 | 64 | 12 | fsdp (ZeRO-3) | 150 |" in md
    assert "| mlp/small | 2 | 64 | 20 | zero1 | 170 |" in md
    # The pipeline table: theoretical and measured bubble side by side, per configuration.
    assert "| mlp/small | pp | gpipe | 2 | 1 | 4 | 0.2 | 0.3 |" in md
    assert md.count("EMULATED devices:") == 1  # one banner
    assert "## Hybrid against its parts" in md
    assert "| mlp/small | hybrid (gpipe, m=4) | 2 | 2 | 0.75 | 0.9 | 1.25 |" in md
    assert "**mlp/small on 2 device(s), batch 64**: use **ddp**. 180.0 [178.2, 181.8] samples/s" in md
    assert "no result within 60 s" in md and "timeout" in md  # the failed configuration, with its reason
    assert "| " + str(results_file) + " | 4 |" in md  # the torn line, by number
    assert "MFU is left out: no run knows its devices' peak FLOP/s" in md  # CPU runs: no peak
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 7  # self-contained: every figure inlined
    assert "testhost" in html and "Test CPU" in html


def test_mfu_is_drawn_per_strategy_where_some_run_knows_its_peak(tmp_path: Path) -> None:
    from reports.context import context
    from reports.sections import mfu

    path = tmp_path / "gpu.jsonl"
    rows = [{**record("single", 1, 100.0), "mfu": 0.4}, {**record("ddp", 2, 180.0), "mfu": 0.36}, record("mp", 2, 90.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = load([path])
    assert list(results.runs["mfu"].isna()) == [False, False, True]
    section = mfu.section(context(results, tmp_path))
    assert section.figures == [tmp_path / "mfu.png"] and "left out" not in section.paragraphs[0]
    assert (tmp_path / "mfu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = pd.read_csv(tmp_path / "mfu.csv")
    assert sorted(data["mfu"]) == [0.36, 0.4] and set(data["variant"]) == {"single", "ddp"}


def test_report_cli_refuses_another_record_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers.cli import run_in_process

    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"record_version": 0}) + "\n")
    code, err = run_in_process(capsys, "report", str(path), "--out", str(tmp_path / "r"))
    assert code == 2
    assert "version-0 record; this suite reads version" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


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


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ('{"record_version": %d, "status": "ok", "strategy": "ddp"}\n', ".jsonl",
         "record 1 (run) lacks model, preset, accelerator, device_count, config"),
        ('{"record_version": %d, "kind": "bench-of-another-tool"}\n', ".jsonl",
         "record 1 is of kind 'bench-of-another-tool'"),
        ('{"benchmarks": [1, 2]}', ".json", "cannot read benchmark JSON"),
        ("[]", ".json", "cannot read benchmark JSON"),
    ],
)
def test_a_foreign_or_malformed_results_file_is_one_line_and_exit_2(
    content: str, suffix: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.harness.records import RECORD_VERSION
    from tests.helpers.cli import run_in_process

    path = tmp_path / f"foreign{suffix}"
    path.write_text(content % RECORD_VERSION if "%d" in content else content)
    code, err = run_in_process(capsys, "report", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r").exists()


def test_an_output_path_that_is_a_file_is_refused_before_anything_is_read(
    results_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers.cli import run_in_process

    blocker = tmp_path / "report.txt"
    blocker.write_text("keep me")
    code, err = run_in_process(capsys, "report", str(results_file), "--out", str(blocker))
    assert code == 2 and err.count("\n") == 1 and "a file, not a folder" in err
    assert blocker.read_text() == "keep me"
    code, err = run_in_process(capsys, "report", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r"))
    assert code == 2 and "no such results file" in err


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
