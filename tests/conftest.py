"""Shared test helpers: run the CLI in a subprocess and read what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m bench ARGS`` from the repository root, as a user would type it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results.jsonl"
