"""Running the CLI as a user would: in a subprocess, or in this process for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import strategies
from bench.cli import main
from bench.harness import launch, processes
from bench.harness.ranks import rank_context

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m bench ARGS`` from the repository root with ``env`` over this process's environment, as a user
    would type it, run as a sweep runs its commands (bench/harness/launch.py, ``run_child``): in a process of its
    own forked from this one's fork server, which imported torch and the suite once. A fresh interpreter spends
    1.1-1.4 s of a core on those imports (2 cores): the tests run about 50 commands. What only a fresh
    interpreter shows (its imports, its exit, its signals) is tested on one: tests/test_imports.py,
    tests/test_processes.py and test_faults.py's Ctrl-C."""
    command = [sys.executable, "-m", "bench", *args]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as folder:
        stdout, stderr = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = rank_context().Process(  # type: ignore[attr-defined]
            target=_python_m_bench, args=(list(args), {**os.environ, **(env or {})}, stdout, stderr))
        process.start()
        child = launch.ForkedChild(process)
        try:
            child.wait(timeout)
        except BaseException:  # past its timeout, or the test stopped: nothing it started outlives it
            processes.stop(child)
            raise
        return subprocess.CompletedProcess(command, child.returncode, Path(stdout).read_text(errors="replace"),
                                           Path(stderr).read_text(errors="replace"))


def _python_m_bench(args: list[str], env: dict[str, str], stdout: str, stderr: str) -> None:
    """In the forked process: ``python -m bench ARGS`` in the repository root. The server imported the strategies
    under its own environment; a fresh interpreter would register the plugins ``env`` names (strategies/__init__.py)."""
    os.chdir(ROOT)
    strategies.load_plugins(env.get(strategies.PLUGINS_VARIABLE, ""))
    launch._bench_child(args, env, stdout, stderr)


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
