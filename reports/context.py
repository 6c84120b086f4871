"""What every section reads: the records, their configurations with speed-ups and verdicts, where to write."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports.load import Results
from reports.scaling import with_scaling
from reports.tables import fastest, with_verification


@dataclass(frozen=True)
class Context:
    """The report's inputs, computed once: each section reads what it needs of them."""

    results: Results
    runs: pd.DataFrame
    """One row per configuration (its repeats combined), with speed-up and ``verified``."""
    baseline: pd.DataFrame
    """The ``single`` configurations on one device (the ideal-scaling lines start there)."""
    leaders: pd.DataFrame
    """The fastest table: per model, device count and global batch, the winner or tie (``winners``)."""
    out: Path

    @property
    def emulated(self) -> bool:
        return self.results.emulated

    @property
    def verify_read(self) -> bool:
        """Whether some ``bench verify`` row was among the records."""
        return not self.results.verify.empty


def context(results: Results, out: Path) -> Context:
    runs, baseline = with_scaling(results.runs)
    runs = with_verification(runs, results.verify)
    leaders = fastest(runs) if not runs.empty else pd.DataFrame()
    return Context(results, runs, baseline, leaders, out)
