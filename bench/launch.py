"""Starting PER_DEVICE strategies: torchrun for one node, or nothing when the user already used it.

``python -m bench run --strategy ddp --devices 4`` re-runs its own command line under

    python -m torch.distributed.run --standalone --nproc-per-node 4 -m bench run ...

and every worker process finds itself under torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) and
trains. A user who launches torchrun directly, on one node or many, reaches the same workers.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import uuid

from strategies.distributed import RENDEZVOUS_FILE_VARIABLE

log = logging.getLogger(__name__)


def under_torchrun() -> bool:
    """True in a worker process started by torchrun (or any launcher that sets its variables)."""
    return all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def threads_per_process(processes: int) -> int:
    """CPU threads for each of ``processes`` processes sharing this machine: cores // N, at least 1."""
    return max(1, (os.cpu_count() or 1) // processes)


def torchrun_command(nproc: int, bench_args: list[str], max_restarts: int = 0) -> list[str]:
    """The standalone (single-node) torchrun command that re-runs ``bench_args`` on ``nproc`` workers.

    ``--max-restarts 0`` by default: a benchmark that silently restarts would time the restart.
    """
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}",
        "-m", "bench", *bench_args,
    ]  # fmt: skip


def torchrun_env(nproc: int, accelerator: str, max_restarts: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    if max_restarts and RENDEZVOUS_FILE_VARIABLE not in env:
        # A restarted attempt re-forming its gloo group through torchrun's store timed out in
        # connectFullMesh in 2 of 6 tries here (torch 2.14.1); a fresh file store per attempt
        # (strategies.distributed.init_process_group) recovered in 4 of 4.
        env[RENDEZVOUS_FILE_VARIABLE] = os.path.join(tempfile.gettempdir(), f"bench-rendezvous-{uuid.uuid4().hex}")
    if accelerator == "cpu":
        # torchrun would set OMP_NUM_THREADS=1; N emulated devices share the cores instead.
        env["OMP_NUM_THREADS"] = str(threads_per_process(nproc))
    return env


def launch_local(nproc: int, bench_args: list[str], accelerator: str, max_restarts: int = 0) -> int:
    """Runs ``bench_args`` under torchrun on this machine and returns torchrun's exit code."""
    command = torchrun_command(nproc, bench_args, max_restarts)
    log.info("launching: %s", " ".join(command))
    return subprocess.run(command, env=torchrun_env(nproc, accelerator, max_restarts), check=False).returncode


def child_command(
    bench_args: list[str], per_device: bool, nproc: int, accelerator: str, max_restarts: int = 0
) -> tuple[list[str], dict]:
    """The command (and environment) that runs ``bench_args`` in a fresh process: torchrun directly for
    per-device strategies, sparing the sweep a ``bench`` process whose only job would be to start it."""
    if per_device:
        return torchrun_command(nproc, bench_args, max_restarts), torchrun_env(nproc, accelerator, max_restarts)
    return [sys.executable, "-m", "bench", *bench_args], dict(os.environ)
