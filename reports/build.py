"""Records in, a report out: what ``python -m bench report RESULTS... --out DIR`` does.

The report is the ordered list of its sections; each section (reports/sections/) owns its table, figures,
CSVs and words, and returns None where the records give it nothing to show. A new section is one module
and one line here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from reports.context import Context, context
from reports.load import Results, load
from reports.render import Section, write_html, write_markdown
from reports.sections import (
    breakdown,
    environment,
    failures,
    fidelity,
    hybrid,
    memory,
    mfu,
    pipelines,
    plan,
    prediction_scores,
    predictions,
    published,
    throughput,
    traces,
    verdict,
    verification,
    what_if,
)

__all__ = ["FIDELITY_HINT", "SECTIONS", "build_report", "report_from_files"]
FIDELITY_HINT = fidelity.FIDELITY_HINT  # where tests/test_fidelity.py reads it

log = logging.getLogger(__name__)

SECTIONS: list[Callable[[Context], Section | None]] = [
    verdict.section,
    throughput.section,
    memory.section,
    pipelines.section,
    breakdown.section,
    hybrid.section,
    mfu.section,
    predictions.section,
    what_if.section,
    plan.section,
    published.section,
    # The appendix: the evidence behind the figures above.
    predictions.per_configuration,
    prediction_scores.section,
    verification.section,
    fidelity.section,
    traces.section,
    failures.section,
    environment.section,
]
"""The report, top to bottom: the decision first, the evidence after, the appendix last."""


def report_from_files(paths: list[Path], out: Path) -> list[Path]:
    """Reads the records in ``paths`` and writes their report into ``out``; returns the files written.

    Raises ``RecordError`` before writing anything where a file cannot be read or holds another
    record version; torn lines are skipped with a warning and listed in the report."""
    results = load(paths)
    for path, bad in results.bad_lines:
        log.warning("%s:%d skipped: %s", path, bad.line_number, bad.reason)
    return build_report(results, out)


def build_report(results: Results, out: Path) -> list[Path]:
    """Writes ``report.md``, ``report.html`` and their PNGs (each with its CSV) into ``out``; returns the files
    written: the two pages, then the figures."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = context(results, out)
    sections = [s for s in (make(ctx) for make in SECTIONS) if s is not None]
    if not any(not s.appendix for s in sections):
        sections.insert(0, Section("Verdict", ["Nothing to decide from: these records hold no measured run and no "
                                               "prediction (see the appendix for what they do hold)."]))
    md, page = out / "report.md", out / "report.html"
    title = "Parallelism strategy comparison"
    banner = (f"EMULATED devices: {len(ctx.runs)} configurations ran as processes sharing this machine's CPU cores; "
              "they show correctness and overheads, not GPU speed. Emulated rows say so in their `emulated` column."
              if ctx.emulated else None)
    figures = [f for s in sections for f in s.figures]
    write_markdown(title, sections, md, banner)
    write_html(title, sections, page, banner)
    return [md, page, *figures]
