"""bench/worker.py: a forked worker of ``bench run`` ends as ``python -m bench`` would end in that worker.

The launches themselves (workers forked from the server, their failures, a killed launcher) are run for real
in tests/test_faults.py, tests/test_failures.py and tests/test_processes.py."""

from __future__ import annotations

import runpy
import signal

import pytest

from bench.harness import launch


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """bench/worker.py as the fork server imports it, asking nothing of Linux for this test's process."""
    import bench.worker

    monkeypatch.setattr(bench.worker, "die_with_parent", lambda: None)
    monkeypatch.setattr(bench.worker, "die_with", lambda pid: None)
    return bench.worker


def _main_that(monkeypatch: pytest.MonkeyPatch, worker, outcome: object) -> None:  # noqa: ANN001
    def main(argv: list[str]) -> int:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    monkeypatch.setattr(worker, "main", main)


@pytest.mark.parametrize(("outcome", "code"), [(0, 0), (None, 0), (3, 3), (KeyboardInterrupt(), 128 + signal.SIGINT)])
def test_the_worker_ends_with_its_commands_exit_code(outcome: object, code: int, worker,  # noqa: ANN001
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _main_that(monkeypatch, worker, outcome)
    assert worker.work(["run"]) == code


def test_what_the_command_did_not_catch_is_a_traceback_on_the_workers_stderr_and_exit_1(
    worker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],  # noqa: ANN001
) -> None:
    """torch's multiprocessing would hand the traceback to the agent only, and the failed run's output would
    not say what failed."""
    _main_that(monkeypatch, worker, RuntimeError("injected"))
    assert worker.work(["run"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: injected" in err


def test_bad_input_keeps_its_own_exit_code(worker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    _main_that(monkeypatch, worker, SystemExit(2))
    with pytest.raises(SystemExit) as exited:
        worker.work(["run"])
    assert exited.value.code == 2


def test_run_as_torchruns_run_path_runs_it_the_worker_exits_with_the_code(
    worker, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    """torchrun's ``--run-path`` runs the file with runpy as ``__main__``: a non-zero code leaves as SystemExit."""
    monkeypatch.setattr("bench.harness.processes.die_with_parent", lambda: None)
    monkeypatch.setattr("bench.harness.processes.die_with", lambda pid: None)
    monkeypatch.setattr("bench.cli.main", lambda argv: 3)
    monkeypatch.setattr("sys.argv", [str(launch.WORKER), "run"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(launch.WORKER), run_name="__main__")
    assert exited.value.code == 3
