"""The report's pages: Markdown beside its PNGs and one self-contained HTML page (reports/render.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd

from reports.build import build_report
from reports.load import load
from reports.render import Section, body_words, inline, markdown_table, write_html, write_markdown

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "example-cpu-2core"
PNG = b"\x89PNG\r\n\x1a\nnot an image"


def _sections(tmp_path: Path) -> list[Section]:
    """An appendix section listed first, and a body section with a table and a figure."""
    (tmp_path / "fig.png").write_bytes(PNG)
    return [Section("Logs", ["raw"], preformatted="line 1\n", appendix=True),
            Section("Verdict", ["use **ddp**: `bench run`"], [pd.DataFrame({"a": [0.5]})], [tmp_path / "fig.png"])]


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


def test_a_markdown_table_prints_floats_to_3_figures_nan_as_blank_and_no_cell_breaks_the_row() -> None:
    frame = pd.DataFrame({"variant": ["ddp", "a|b", "pp"], "ms": [1.23456, float("nan"), 12345.6], "n": [1, 2, 3]})
    assert markdown_table(frame).splitlines() == ["| variant | ms | n |", "|---|---|---|", "| ddp | 1.23 | 1 |",
                                                  "| a/b |  | 2 |", "| pp | 12,346 | 3 |"]


def test_the_markdown_puts_the_banner_first_and_the_appendix_after_the_body(tmp_path: Path) -> None:
    write_markdown("Title", _sections(tmp_path), tmp_path / "r.md", banner="EMULATED")
    assert (tmp_path / "r.md").read_text().split("\n\n") == [
        "# Title", "> **EMULATED**", "## Verdict", "use **ddp**: `bench run`", "| a |\n|---|\n| 0.5 |",
        "![fig](fig.png)", "## Appendix", "The evidence behind the sections above: verification, how far to trust the "
        "timings, traces, what did not run, the machines.", "## Logs", "raw", "```\nline 1\n```\n"]


def test_the_html_page_escapes_the_text_and_inlines_each_figure(tmp_path: Path) -> None:
    write_html("T<1>", _sections(tmp_path), tmp_path / "r.html", banner="EMULATED `x`")
    page = (tmp_path / "r.html").read_text()
    assert "<title>T&lt;1&gt;</title>" in page and '<p class="banner">EMULATED <code>x</code></p>' in page
    assert page.index('<h2 id="verdict">Verdict</h2>') < page.index('<h2 id="appendix">Appendix</h2>') < \
        page.index('<h2 id="logs">Logs</h2>')
    assert f'<img alt="fig" src="data:image/png;base64,{base64.b64encode(PNG).decode()}">' in page
    assert "<td>0.5</td>" in page and "<pre>line 1\n</pre>" in page
    assert inline('a < b & `c<d>` **bold**') == "a &lt; b &amp; <code>c&lt;d&gt;</code> <strong>bold</strong>"


def test_body_words_counts_the_words_before_the_appendix_only() -> None:
    assert body_words("# T\n\nuse ddp's 1.5x at 90% on a/b\n\n## Appendix\n\nmore words here") == 8
    assert body_words("# T\n\none two") == 3  # no appendix: every word
