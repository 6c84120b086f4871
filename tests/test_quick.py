"""The `quick` marker keeps its word: inside the guard the root conftest.py puts around quick tests, a Python
child fails with the reason, and cheap programs (git, nvidia-smi) still run."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from tests.helpers.quick import StartedAProcess, no_python_processes


def test_this_test_is_marked_quick(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("quick") is not None


@pytest.mark.parametrize("argv", [[sys.executable, "-c", "pass"], ["python3", "-c", "pass"], "python -c pass",
                                  ["torchrun", "--help"]])
def test_a_python_or_torchrun_child_is_refused(argv: list[str] | str) -> None:
    with no_python_processes(), pytest.raises(StartedAProcess, match="mark the test @pytest.mark.launches"):
        subprocess.run(argv, shell=isinstance(argv, str), check=False)


def test_multiprocessing_is_refused() -> None:
    with no_python_processes(), pytest.raises(StartedAProcess):
        multiprocessing.get_context("spawn").Process(target=print).start()


def test_git_still_runs() -> None:
    with no_python_processes():
        assert subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.startswith("git version")


@pytest.mark.launches
def test_a_launching_test_is_not_quick_and_may_start_python(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("quick") is None
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"
