"""Layers: bench measures and records, reports reads records; only the report command reaches up."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.cli import ROOT

ALLOWED = {Path("bench/report_cli.py")}
"""The one bench module that may import reports: ``bench report`` is the command over it."""


def _imports_reports(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "reports" or n.startswith("reports.") for n in names):
            return True
    return False


def test_nothing_in_bench_imports_reports_but_the_report_command() -> None:
    # Before bench/stats.py, bench/fidelity/results.py and bench/fidelity/bubble.py imported reports.stats.
    offenders = [p.relative_to(ROOT) for p in sorted((Path(ROOT) / "bench").rglob("*.py"))
                 if _imports_reports(p) and p.relative_to(ROOT) not in ALLOWED]
    assert offenders == []
    assert _imports_reports(Path(ROOT) / "bench" / "report_cli.py")  # the scan sees a real import
