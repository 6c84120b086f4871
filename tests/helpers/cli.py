"""Running the CLI as a user would: in a subprocess, or in this process for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]


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


@dataclass(frozen=True)
class BenchRun:
    """A ``python -m bench run`` that has ended: how, what it wrote where, and in how many seconds."""

    proc: subprocess.CompletedProcess
    out: Path
    seconds: float


def run_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The CLI's exit code and stderr. Bad input is caught before any process starts, so running
    ``main`` in this process shows exactly what a user sees, without paying for a fresh interpreter."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code, capsys.readouterr().err
