"""The report, built from a small fixed set of records: figures exist, tables hold the right numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.build import build_report
from reports.load import load


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


def test_report_cli_refuses_another_record_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers.cli import run_in_process

    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"record_version": 0}) + "\n")
    code, err = run_in_process(capsys, "report", str(path), "--out", str(tmp_path / "r"))
    assert code == 2
    assert "version-0 record; this suite reads version" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


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
