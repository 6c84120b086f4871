"""Starting PER_DEVICE strategies: torchrun for one node, or nothing when the user already used it.

``python -m bench run --strategy ddp --devices 4`` re-runs its own command line under torchrun's
agent, as

    python -m torch.distributed.run --standalone --nproc-per-node 4 --start-method forkserver \
        --run-path /.../bench/worker.py run ...

would, and every worker process finds itself under torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) and
trains. ``bench run`` runs that agent in its own process (torch.distributed.run's ``run``, the function
torchrun's command line calls), sparing an interpreter that would import torch only to start the
workers; on CPUs the workers are forked from that process itself, which imported torch and the suite
already, and on GPUs from a server that imported them once (``worker_start_method``), sparing each of
them those imports. A sweep (and verify) forks each ``bench run`` from its own fork server
(``run_child``), sparing it the same imports.
A user who launches torchrun directly (``torchrun ... -m bench run``), on one node or many, reaches the
same code in workers that import it themselves.
"""

from __future__ import annotations

import atexit
import glob
import importlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import processes
from bench.harness.failures import FAILURE_DIR_VARIABLE, read_failures
from bench.harness.ranks import PRELOADED, rank_context
from strategies.cost_model import threads_per_process
from strategies.distributed import RENDEZVOUS_FILE_VARIABLE

RESOLVED_CONFIG_VARIABLE = "BENCH_RESOLVED_CONFIG"
"""The launcher's resolved configuration, as JSON, for the torchrun workers it starts: a run is
validated once, where it is launched, not again in each of its processes."""

TORCHRUN_LOG_DIR_VARIABLE = "PET_LOG_DIR"
"""torchrun's ``--log-dir``: unset, its agent leaves a ``torchelastic_*`` folder in the temporary folder at
every launch, empty unless ``--redirects`` or ``--tee`` were asked for."""

log = logging.getLogger(__name__)


def under_torchrun() -> bool:
    """True in a worker process started by torchrun (or any launcher that sets its variables)."""
    return all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


WORKER = Path(__file__).resolve().parents[1] / "worker.py"
"""What each worker of ``bench run``'s own launch runs (torchrun's ``--run-path`` takes a file, not a module)."""


def torchrun_command(nproc: int, bench_args: list[str], max_restarts: int = 0,
                     start_method: str = "forkserver") -> list[str]:
    """The standalone (single-node) torchrun command that re-runs ``bench_args`` on ``nproc`` workers,
    started as ``start_method`` says (``worker_start_method``).

    ``--max-restarts 0`` by default: a benchmark that silently restarts would time the restart.
    """
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}",
        f"--start-method={start_method}", "--run-path", str(WORKER), *bench_args,
    ]


def worker_start_method(accelerator: str) -> str:
    """How the agent in this process starts its workers. On CPUs, forked from this process, which has imported
    torch and the suite: a fork server of their own imported them afresh at every launch, and a tiny run of a
    sweep took 4-5 s on the 2-core VM (1-2 s forked so). Safe only while this process has made no OpenMP
    team (libgomp's threads do not survive a fork: a child's first parallel region of 2 threads then waits on
    them for ever): ``bench run`` validates on one thread (bench/cli.py) and computes nothing after. On GPUs,
    from a server that imported them once and holds no CUDA state (``forked_workers``)."""
    return "fork" if accelerator == "cpu" else "forkserver"


def forked_workers() -> None:
    """Has this process's fork server (started by the agent's first worker, with the environment of that
    moment) import torch, the suite and ``WORKER``'s own imports before it forks any worker. It holds no
    thread pool, device or process group for them to inherit (bench/harness/ranks.py)."""
    rank_context().set_forkserver_preload([*PRELOADED, "bench.worker"])


def torchrun_env(nproc: int, accelerator: str, max_restarts: int = 0, resolved: str | None = None) -> dict[str, str]:
    """The workers' environment: ``resolved`` is the launcher's resolved configuration (JSON), which
    they take as it is instead of validating the command line again (1 + N times in all)."""
    env = dict(os.environ)
    if resolved is not None:
        env[RESOLVED_CONFIG_VARIABLE] = resolved
    if max_restarts and RENDEZVOUS_FILE_VARIABLE not in env:
        # A restarted attempt re-forming its gloo group through torchrun's store timed out in
        # connectFullMesh in 2 of 6 tries here (torch 2.14.1); a fresh file store per attempt
        # (strategies.distributed.init_process_group) recovered in 4 of 4.
        env[RENDEZVOUS_FILE_VARIABLE] = os.path.join(tempfile.gettempdir(), f"bench-rendezvous-{uuid.uuid4().hex}")
    if accelerator == "cpu":
        # torchrun would set OMP_NUM_THREADS=1; N emulated devices share the cores instead.
        env["OMP_NUM_THREADS"] = str(threads_per_process(nproc))
        # Idle OpenMP threads sleep rather than spin where ranks share the cores: a spinning rank starves its
        # peer of the core it waits on, and one core taken by another process for a moment then stalls both
        # for long. One rank has no peer to starve, and sleeping cost it: ddp on one device (small mlp, batch
        # 64, 2 threads) 28.7-29.9 ms a step with PASSIVE, 24.9-25.9 without (3 runs each, alternating).
        if nproc > 1:
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def launch_local(
    nproc: int, bench_args: list[str], accelerator: str, max_restarts: int = 0, resolved: str | None = None
) -> int:
    """Runs ``bench_args`` under torchrun's agent in this process and returns the exit code torchrun
    would have: 0, 1 when a worker failed, 128 + the signal that stopped it.

    The workers' output passes through; after a failure, one line below it says which rank failed
    first, at which step, and how the others ended. The workers' environment is this process's while
    the agent runs; torchrun's agent installs its signal handlers here."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    start_method = worker_start_method(accelerator)
    command = torchrun_command(nproc, bench_args, max_restarts, start_method)
    log.info("launching: %s", " ".join(command))
    ours = dict(os.environ)
    with _launch_files(torchrun_env(nproc, accelerator, max_restarts, resolved)) as (env, notes):
        # torchrun's agent hands its workers this process's environment
        os.environ.update({**env, processes.AGENT_VARIABLE: str(os.getpid())})  # the fork server's parent
        if start_method == "forkserver":
            forked_workers()
        else:  # forked from here, each worker dies with this process (bench/worker.py), not with a server
            os.environ.pop(processes.SERVER_VARIABLE, None)
        try:
            run(parse_args(command[3:]))  # past "python -m torch.distributed.run"
            returncode = 0
        except ChildFailedError:
            returncode = 1
        except SignalException as stopped:  # the agent has stopped the workers; end as a signal would
            returncode = 128 + int(stopped.sigval)
        finally:
            os.environ.clear()
            os.environ.update(ours)
        if returncode != 0:
            print(f"bench run: {read_failures(notes).line()}", file=sys.stderr)
    return returncode


@contextmanager
def _launch_files(env: dict[str, str]) -> Iterator[tuple[dict[str, str], Path]]:
    """``env`` for one launch, pointing at a folder of its own for the ranks' failure notes and torchrun's
    logs; the folder, and the rendezvous files of every attempt when the launcher chose their name
    (``torchrun_env``), are gone when the launch ends: a sweep of hundreds of runs leaves nothing behind
    in the temporary folder, and no later run meets an earlier one's rendezvous keys. A launch inside
    another's (the ``bench run`` a sweep starts) writes its ranks' notes where the outer one reads them."""
    inherited = env.get(FAILURE_DIR_VARIABLE)
    with nullcontext(inherited) if inherited else tempfile.TemporaryDirectory(prefix="bench-launch-") as folder:
        env = {**env, FAILURE_DIR_VARIABLE: folder}
        if TORCHRUN_LOG_DIR_VARIABLE not in os.environ:  # the user's own log folder stays theirs
            env[TORCHRUN_LOG_DIR_VARIABLE] = os.path.join(folder, "torchrun")
        try:
            yield env, Path(folder)
        finally:
            rendezvous = env.get(RENDEZVOUS_FILE_VARIABLE)
            if rendezvous and rendezvous != os.environ.get(RENDEZVOUS_FILE_VARIABLE):
                for attempt in glob.glob(f"{glob.escape(rendezvous)}.attempt*"):
                    os.remove(attempt)


def child_command(bench_args: list[str]) -> tuple[list[str], dict]:
    """The command (and environment) that runs ``bench_args`` in a fresh process: ``bench run``, which
    launches its per-device workers itself (``launch_local``) from one import of torch and the suite; torchrun
    started directly would have each worker import them."""
    return [sys.executable, "-m", "bench", *bench_args], dict(os.environ)


@dataclass(frozen=True)
class ChildOutcome:
    """How one child run ended."""

    status: str
    """``ok``, ``failed``, ``oom`` or ``timeout``."""
    reason: str
    """One line: which rank failed first, at which step, with what; empty when ok."""
    seconds: float


def run_child(
    bench_args: list[str], env: dict[str, str], timeout_s: float, log_path: Path | None = None,
) -> ChildOutcome:
    """Runs ``python -m bench *bench_args`` (a ``bench run``) in a child of its own, with ``env`` as its whole
    environment, to its end or ``timeout_s``, whichever comes first.

    The child is forked from this process's fork server (``rank_context``), which imported torch and the suite
    once: a sweep's run no longer spends 1.7 s of a core importing them before it starts. It is its own process
    in a session of its own, as a ``python -m bench`` child would be. Its whole output goes to ``log_path``
    (else nowhere); the outcome carries one line from the ranks' own notes (bench/harness/failures.py).
    Nothing it started outlives this call or its caller."""
    with _launch_files(env) as (env, notes):
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        child = ForkedChild.start(bench_args, env, str(log_path) if log_path is not None else os.devnull)
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            processes.stop(child)
            return ChildOutcome("timeout", f"no result within {timeout_s:.0f} s", time.monotonic() - start)
        except BaseException:  # Ctrl-C: leave no worker behind, then let the caller stop
            processes.stop(child)
            raise
        seconds = time.monotonic() - start
        if child.returncode == 0:
            return ChildOutcome("ok", "", seconds)
        ended = read_failures(notes)
        if ended.failures or ended.vanished:
            reason = ended.line()
        else:  # it ended before any rank began (a bad argument, an import error): its last words say why
            reason = f"exit code {child.returncode} before any rank started: {_last_line(log_path)}"
        if log_path is not None:
            reason += f" (log: {log_path})"
        return ChildOutcome(ended.status, reason[:1000], seconds)


class ForkedChild:
    """A ``python -m bench`` child forked from the fork server, with the part of ``subprocess.Popen`` that
    ``run_child`` and ``processes.stop`` use (``pid``, ``wait``, ``returncode``)."""

    def __init__(self, process: Any) -> None:  # a ForkServerProcess (typeshed gives BaseContext no Process)
        self._process = process
        self.pid: int = process.pid

    @classmethod
    def start(cls, bench_args: list[str], env: dict[str, str], output: str) -> ForkedChild:
        process = rank_context().Process(target=_bench_child, args=(bench_args, env, output))  # type: ignore[attr-defined]
        process.start()
        return cls(process)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("python -m bench", timeout or 0)
        return self._process.exitcode


def _bench_child(bench_args: list[str], env: dict[str, str], output: str, errors: str | None = None) -> None:
    """In the forked child: what ``python -m bench`` started with ``env``, its output on ``output`` (and its
    errors on ``errors``, else there too) would do."""
    os.setsid()  # a session of its own: a terminal's Ctrl-C reaches the sweep only, and stop() its whole group
    processes.die_with(int(os.environ[processes.SERVER_VARIABLE]))  # which dies with the sweep (fork_server.py)
    out = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if errors else out
    os.dup2(out, 1)
    os.dup2(err, 2)
    for descriptor in {out, err}:
        os.close(descriptor)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [sys.argv[0], *bench_args]
    # The entry point sits above the harness: it is named, not imported.
    code = importlib.import_module("bench.worker").work(bench_args)
    atexit._run_exitfuncs()  # as bench/__main__.py ends; multiprocessing's own exit skips them
    raise SystemExit(code)


def _last_line(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
