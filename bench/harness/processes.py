"""Processes the suite starts, and how they end: none outlives the process that started it.

Three layers start processes here: ``bench run`` runs torchrun's agent, which starts one worker per
device (forked from a fork server, bench/worker.py; a torchrun the user starts spawns them), and a
sweep forks ``bench run`` from its own fork server. torchrun puts each worker it spawns in a session
of its own, so killing a process group does not reach them; and SIGKILL, a crash or an expired
timeout give a parent no chance to clean up. So every process we start, and every worker we run in,
asks Linux to kill it when its parent dies (``prctl(PR_SET_PDEATHSIG)``):

    bench run --(bench/harness/fork_server.py)--> fork server --(workers call it themselves)--> worker 0, 1, ...
    sweep --(fork_server.py)--> fork server --(die_with)--> bench run --> ... as above

A parent that dies, however, takes the whole chain with it. Elsewhere than Linux this is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Protocol

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Makes the kernel SIGKILL this process when its parent exits (Linux; elsewhere nothing).

    Usable as ``preexec_fn`` (runs in the child before exec, and survives the exec) or called
    first thing in a process someone else started (torchrun's workers, spawned ranks). A parent
    that died before the call has already handed us to init: then we leave at once.
    """
    die_with(os.getppid())


def die_with(parent: int) -> None:
    """``die_with_parent`` for a process that knows which parent it should have: if ``parent`` died before
    the call (it is no longer our parent), we leave at once."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not allowed here (a seccomp sandbox, say): the timeouts still apply
    if os.getppid() != parent:
        os._exit(1)


AGENT_VARIABLE = "BENCH_AGENT_PID"
"""The pid of ``bench run``'s process, torchrun's agent inside it: the parent its fork server must have."""
SERVER_VARIABLE = "BENCH_FORK_SERVER_PID"
"""The fork server's pid, which the workers it forks inherit: the parent they must have."""
class Child(Protocol):
    """What ``stop`` needs of a child: a child forked from the fork server (bench/harness/launch.py), or a
    ``subprocess.Popen``."""

    pid: int

    def wait(self, timeout: float | None = None) -> int: ...


def stop(child: Child, grace_s: float = 10) -> None:
    """SIGTERM to the child's process group, SIGKILL after ``grace_s``; returns once it is gone.

    torchrun forwards SIGTERM to its workers; the ones it could not reach die with it (above). A forked
    child makes its group a moment after it starts: until then the signal goes to it alone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                break
        try:
            child.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
    child.wait()
