"""bench/harness/launch.py: ``bench run`` runs torchrun's agent in its own process and ends as torchrun would."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch.distributed.run
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from bench.harness import launch, processes
from bench.harness.failures import FAILURE_DIR_VARIABLE


def _agent(monkeypatch: pytest.MonkeyPatch, outcome: BaseException | None) -> list:
    """torchrun's ``run`` replaced by one that records its arguments and the environment it would hand
    the workers, then ends with ``outcome`` (None: the workers succeeded)."""
    seen: list = []

    def run(args) -> None:  # noqa: ANN001
        seen.append((args, dict(os.environ)))
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(torch.distributed.run, "run", run)
    return seen


def test_the_agent_gets_torchruns_own_arguments_and_the_workers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _agent(monkeypatch, None)
    monkeypatch.setenv(processes.SERVER_VARIABLE, "1")  # as a process forked from a fork server has it
    assert launch.launch_local(2, ["run", "--strategy", "ddp"], "cpu", max_restarts=1, resolved="{}") == 0
    (args, env), = seen
    assert (args.standalone, args.nproc_per_node, args.max_restarts) == (True, "2", 1)
    # on a CPU the workers fork from this process (which imported torch and the suite), each dying with it
    assert (args.run_path, args.start_method, args.training_script) == (True, "fork", str(launch.WORKER))
    assert args.training_script_args == ["run", "--strategy", "ddp"]
    assert env[launch.RESOLVED_CONFIG_VARIABLE] == "{}"
    assert processes.SERVER_VARIABLE not in env and os.environ[processes.SERVER_VARIABLE] == "1"
    assert Path(env[FAILURE_DIR_VARIABLE]).name.startswith("bench-launch-")
    assert args.log_dir == os.path.join(env[FAILURE_DIR_VARIABLE], "torchrun")  # not a torchelastic_* in /tmp
    assert FAILURE_DIR_VARIABLE not in os.environ  # this process's own environment is back as it was


def test_on_gpus_the_workers_fork_from_a_server_that_imported_torch_and_the_suite(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _agent(monkeypatch, None)
    preloads: list[list[str]] = []
    monkeypatch.setattr(launch, "rank_context", lambda: type("Context", (), {
        "set_forkserver_preload": staticmethod(preloads.append)})())
    assert launch.launch_local(2, ["run", "--strategy", "ddp"], "cuda") == 0
    (args, env), = seen
    assert args.start_method == "forkserver" and preloads == [[*launch.PRELOADED, "bench.worker"]]
    assert env[processes.AGENT_VARIABLE] == str(os.getpid())  # the parent the workers' fork server must have


def test_a_launch_leaves_no_file_behind_but_the_users_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The failure notes, torchrun's log folder and the rendezvous files of each attempt go with the launch;
    a log folder or rendezvous file the user named stays."""
    monkeypatch.delenv(launch.TORCHRUN_LOG_DIR_VARIABLE, raising=False)
    monkeypatch.delenv(launch.RENDEZVOUS_FILE_VARIABLE, raising=False)
    env = launch.torchrun_env(2, "cpu", max_restarts=1)
    written = []
    with launch._launch_files(env) as (env, notes):
        rendezvous = env[launch.RENDEZVOUS_FILE_VARIABLE]
        for path in (f"{rendezvous}.attempt0", f"{rendezvous}.attempt1",
                     os.path.join(env[launch.TORCHRUN_LOG_DIR_VARIABLE], "run", "attempt_0", "0"),
                     notes / "rank0.json"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("x")
            written.append(Path(path))
    assert not [p for p in written if p.exists()]

    monkeypatch.setenv(launch.TORCHRUN_LOG_DIR_VARIABLE, str(tmp_path / "logs"))
    monkeypatch.setenv(launch.RENDEZVOUS_FILE_VARIABLE, str(tmp_path / "rendezvous"))
    with launch._launch_files(launch.torchrun_env(2, "cpu", max_restarts=1)) as (env, _):
        assert env[launch.TORCHRUN_LOG_DIR_VARIABLE] == str(tmp_path / "logs")
        (tmp_path / "rendezvous.attempt0").write_text("x")
    assert (tmp_path / "rendezvous.attempt0").exists()


@pytest.mark.parametrize(("outcome", "code"), [
    (ChildFailedError("bench", {0: ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file="")}), 1),
    (SignalException("stopped", signal.SIGTERM), 128 + signal.SIGTERM),
])
def test_a_failed_or_stopped_run_ends_with_torchruns_exit_code_and_one_line(
    outcome: BaseException, code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    _agent(monkeypatch, outcome)
    assert launch.launch_local(2, ["run"], "cpu") == code
    assert capsys.readouterr().err.startswith("bench run: ")


def test_ranks_that_share_the_cores_sleep_while_they_wait_and_one_rank_alone_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert launch.torchrun_env(2, "cpu")["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in launch.torchrun_env(1, "cpu")  # no peer to starve: sleeping cost it 15% a step
    assert launch.torchrun_env(1, "cpu")["OMP_NUM_THREADS"] == str(launch.threads_per_process(1))
