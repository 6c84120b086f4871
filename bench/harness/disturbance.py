"""Whether the machine was the run's own while it was timed: other processes' CPU time, load, GPU tenants.

A run on shared cores measures its neighbours as much as itself: beside a few short commands, emulated
runs here became 37-62x slower, and nothing in their figures said so. So every rank notes, around its
run, the machine's busy CPU time (``/proc/stat``), its own CPU time and the load average; the
reporting rank subtracts the run's own CPU time from the machine's and calls the run ``disturbed`` when
other processes took more than ``FOREIGN_SHARE_LIMIT`` of the cores meanwhile. The window runs from
the process's start (or its previous run's end) to its last timed step: both sides of the subtraction
cover it, and it is long enough for ``/proc/stat``'s 10 ms ticks. On GPUs it also counts
compute processes on the run's own devices that are not the run's (``nvidia-smi``), or says unknown.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FOREIGN_SHARE_LIMIT = 0.2
"""Other processes' share of the machine's cores above which a timing is not this run's alone."""
JUDGE_MIN_WALL_S = 0.5
"""Shortest window judged: /proc/stat counts in 10 ms ticks per core, too coarse for less."""


def _machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (None off Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine_cores() -> int:
    """The cores whose busy time ``/proc/stat``'s first line adds up (in a container, the host's), so that
    the share is taken over the same cores; ``os.cpu_count()`` where there is no /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            return sum(1 for line in stat if line[:3] == "cpu" and line[3:4].isdigit()) or (os.cpu_count() or 1)
    except OSError:
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    own_cpu_s: float
    machine_busy_s: float | None
    load_1min: float

    @classmethod
    def now(cls) -> Snapshot:
        return cls(time.perf_counter(), time.process_time(), _machine_busy_s(), os.getloadavg()[0])


_window_start: Snapshot | None = None
_timed_start: Snapshot | None = None


def open_window() -> None:
    """Starts this process's account of the machine, as early as it can: ``python -m bench`` calls it
    before importing torch, so that even a run of a few milliseconds is judged over a second or more."""
    global _window_start
    _window_start = Snapshot.now()


def start_timing() -> None:
    """Marks where the timed steps begin (after the warm-up's barrier): ``close_window`` also accounts for this
    process's own CPU time from here alone."""
    global _timed_start
    _timed_start = Snapshot.now()


def close_window() -> RankLoad:
    """The machine's account since ``open_window`` (or the previous ``close_window``: one per run), and this
    process's CPU and wall time over the timed steps alone where ``start_timing`` marked them."""
    global _window_start, _timed_start
    start, timed = _window_start or Snapshot.now(), _timed_start
    _window_start, _timed_start = Snapshot.now(), None
    load = RankLoad.between(start, _window_start)
    if timed is None:
        return load
    return dataclasses.replace(load, timed_cpu_s=_window_start.own_cpu_s - timed.own_cpu_s,
                               timed_wall_s=_window_start.wall_s - timed.wall_s)


@dataclass(frozen=True)
class RankLoad:
    """What one rank saw of the machine over its timed steps."""

    host: str
    wall_s: float
    own_cpu_s: float
    """This process's CPU time (all its threads) over the window: its start (or its previous run's end) to its last
    timed step."""
    machine_busy_s: float | None
    """The whole machine's busy CPU time over the same window (None where /proc/stat is missing)."""
    load_before: float
    load_after: float
    timed_cpu_s: float | None = None
    """This process's CPU time over its timed steps alone (None where they were not marked): set against what its
    actions' spans took, what a pipeline's rank computes between its actions (the schedule's own work), which on
    shared cores slows the ranks beside it as an action does."""
    timed_wall_s: float | None = None

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> RankLoad:
        busy = None
        if before.machine_busy_s is not None and after.machine_busy_s is not None:
            busy = after.machine_busy_s - before.machine_busy_s
        return cls(socket.gethostname(), after.wall_s - before.wall_s, after.own_cpu_s - before.own_cpu_s, busy,
                   before.load_1min, after.load_1min)


@dataclass(frozen=True)
class Verdict:
    """The record's account of the machine during the run."""

    disturbed: bool
    reason: str | None
    foreign_cpu_share: float | None
    """Other processes' CPU time over the cores' time during the timed steps (worst host)."""
    gpu_tenants: int | None = 0
    """Other processes computing on the run's GPUs; None where that could not be seen (``gpu_tenants``)."""

    def record_fields(self, loads: Sequence[RankLoad]) -> dict[str, Any]:
        return {
            "disturbed": self.disturbed,
            "disturbed_reason": self.reason,
            "machine_load": {
                "foreign_cpu_share": self.foreign_cpu_share,
                "gpu_tenants": "unknown" if self.gpu_tenants is None else self.gpu_tenants,
                "own_cpu_s_per_rank": [round(r.own_cpu_s, 4) for r in loads],
                "wall_s_per_rank": [round(r.wall_s, 4) for r in loads],
                **({"timed_cpu_s_per_rank": [round(r.timed_cpu_s, 4) for r in loads if r.timed_cpu_s is not None],
                    "timed_wall_s_per_rank": [round(r.timed_wall_s, 4) for r in loads if r.timed_wall_s is not None]}
                   if all(r.timed_cpu_s is not None for r in loads) else {}),
                "load_average_before": [r.load_before for r in loads],
                "load_average_after": [r.load_after for r in loads],
            },
        }


def judge(loads: Sequence[RankLoad], cores: int, gpu_tenants: int | None = 0) -> Verdict:
    """``disturbed`` when other processes took more than FOREIGN_SHARE_LIMIT of some host's cores
    while the run was timed, or shared its GPUs. GPU tenants that could not be seen (None) are
    recorded as unknown and disturb nothing: a guess either way would mislead."""
    worst: float | None = None
    for host in sorted({r.host for r in loads}):
        ranks = [r for r in loads if r.host == host]
        busy = ranks[0].machine_busy_s
        wall = max(r.wall_s for r in ranks)
        if busy is None or wall < JUDGE_MIN_WALL_S:
            continue
        share = max(0.0, busy - sum(r.own_cpu_s for r in ranks)) / (cores * wall)
        worst = share if worst is None else max(worst, share)
    reasons = []
    if worst is not None and worst > FOREIGN_SHARE_LIMIT:
        load = f"{loads[0].load_before:.1f} -> {loads[0].load_after:.1f}"
        reasons.append(f"other processes used {worst:.0%} of the {cores} cores during the run "
                       f"(load average {load})")
    if gpu_tenants:
        reasons.append(f"{gpu_tenants} other process(es) computed on its GPUs")
    return Verdict(bool(reasons), "; ".join(reasons) or None, worst, gpu_tenants)


def gpu_tenants(own_pids: set[int]) -> int | None:
    """Compute processes on the run's own GPUs that are neither the run's nor the process tree that
    launched it; None (unknown) where nvidia-smi is missing or lists none of ``own_pids``.

    The run's GPUs are those its own processes hold contexts on: other jobs on the node's other
    GPUs are not its neighbours. The launching tree (pytest training in-process first, torchrun's
    agent, the ``bench`` launcher) holds contexts of its own that stay idle while the run is timed.
    A container with its own PID namespace sees host PIDs in nvidia-smi's list, none of them the
    run's: nothing can then be told apart, hence unknown rather than every process a tenant.
    """
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    apps: set[tuple[int, str]] = set()
    for line in out.splitlines():
        pid, _, gpu = (part.strip() for part in line.partition(","))
        if pid.isdigit() and gpu:
            apps.add((int(pid), gpu))
    own_gpus = {gpu for pid, gpu in apps if pid in own_pids}
    if not own_gpus:
        return None
    ignored = own_pids | launching_tree()
    return len({pid for pid, gpu in apps if gpu in own_gpus and pid not in ignored})


def launching_tree(pid: int | None = None) -> set[int]:
    """The ancestors of ``pid`` (this process by default), read from /proc; empty off Linux."""
    ancestors: set[int] = set()
    current = _parent(os.getpid() if pid is None else pid)
    while current is not None and current > 0 and current not in ancestors:
        ancestors.add(current)
        current = _parent(current)
    return ancestors


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name (field 2) may hold spaces and parentheses; the parent follows the last ")".
            return int(stat.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None
