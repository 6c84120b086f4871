"""Why a multi-process run failed, in one line: which rank failed first, at which step, with what.

When one rank of N fails, the others fail after it (a collective whose peer left, or one that
waited out ``--timeout-s``) and torchrun prints every traceback, the cause somewhere in the
middle. So each worker notes its own end in a folder its launcher gave it (``BENCH_FAILURE_DIR``):

    rank<r>.started   written before set-up (a rank that started and left no other note ended
                      without a Python error: a crash, a kill, or torchrun stopping it)
    rank<r>.json      a RankFailure, written by the rank's own ``except`` before it exits
    rank<r>.done      the rank finished its run

and the launcher, once torchrun has returned, reads them into one line, the cause first:

    rank 1 failed at step 2: RuntimeError: injected; rank 0 stopped because its peer left
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FAILURE_DIR_VARIABLE = "BENCH_FAILURE_DIR"

_STEP_ATTRIBUTE = "_bench_failed_at_step"

# How a rank reports another rank's departure, in gloo's, NCCL's and the store's words.
_PEER_LEFT = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Pair is not connected",
              "DistNetworkError", "communicator was aborted", "NCCL communicator", "failed to recv")
_TIMED_OUT = ("Timed out", "timed out")
# The CPU allocator's words when malloc fails: a RuntimeError, not torch.OutOfMemoryError (which is CUDA's).
_CPU_OUT_OF_MEMORY = "DefaultCPUAllocator: can't allocate memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """True for running out of device memory (CUDA) or host memory (the CPU allocator's failed malloc)."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError)
                                                       and _CPU_OUT_OF_MEMORY in str(exc))


@dataclass(frozen=True)
class RankFailure:
    """One rank's Python error, as that rank saw it."""

    rank: int
    step: int | None
    """The optimizer step (warm-up included) it was in; None before the first step (set-up)."""
    error: str
    """``Type: first line of the message``."""
    time_s: float
    """Wall clock when the rank caught it, to order failures across ranks."""

    @property
    def kind(self) -> str:
        """``oom``, ``timeout`` (it waited out a collective for a peer), ``peer`` (its peer left) or ``error``."""
        if self.error.startswith("OutOfMemoryError") or _CPU_OUT_OF_MEMORY in self.error:
            return "oom"
        if any(word in self.error for word in _PEER_LEFT):
            return "peer"
        if any(word in self.error for word in _TIMED_OUT):
            return "timeout"
        return "error"


def note_step(exc: BaseException, step: int) -> None:
    """Marks ``exc`` as raised in ``step`` (the runner's loop calls this on the way out)."""
    if not hasattr(exc, _STEP_ATTRIBUTE):
        setattr(exc, _STEP_ATTRIBUTE, step)


def describe_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _folder() -> Path | None:
    folder = os.environ.get(FAILURE_DIR_VARIABLE)
    return Path(folder) if folder else None


def note_started(rank: int) -> None:
    if (folder := _folder()) is not None:
        (folder / f"rank{rank}.started").touch()


def note_done(rank: int) -> None:
    if (folder := _folder()) is not None:
        (folder / f"rank{rank}.done").touch()


def note_failure(rank: int, exc: BaseException) -> None:
    """Writes this rank's failure where its launcher will look (nothing outside such a launch)."""
    if (folder := _folder()) is None:
        return
    failure = RankFailure(rank, getattr(exc, _STEP_ATTRIBUTE, None), describe_error(exc), time.time())
    # whole or not at all: a rank stopped while writing (its peers' failure ends the launch) once left an empty note
    # that the launcher could not read
    partial = folder / f".rank{rank}.json.partial"
    partial.write_text(json.dumps(asdict(failure)))
    os.replace(partial, folder / f"rank{rank}.json")


@dataclass(frozen=True)
class LaunchFailure:
    """What the notes of one failed launch say."""

    failures: list[RankFailure]
    vanished: list[int]
    """Ranks that started and left no note: a crash, a kill, or torchrun stopping them."""

    @property
    def status(self) -> str:
        """The sweep's row status: ``oom``, ``timeout`` or ``failed``."""
        kinds = {f.kind for f in self.failures}
        if "oom" in kinds:
            return "oom"
        if "error" not in kinds and "timeout" in kinds:
            return "timeout"
        return "failed"

    def line(self) -> str:
        """Every rank's end, the first cause first: errors, then silent ends, then the echoes."""
        order = {"oom": 0, "error": 0, "timeout": 2, "peer": 3}
        first = sorted(self.failures, key=lambda f: (order[f.kind], f.time_s))
        parts = [_phrase(f) for f in first if order[f.kind] == 0]
        if self.vanished:
            ranks = " and ".join(map(str, self.vanished))
            parts.append(f"rank{'s' if len(self.vanished) > 1 else ''} {ranks} ended without a Python error "
                         "(a crash, a kill or a stall; on Linux the kernel's out-of-memory killer also ends a process "
                         "this way; the launcher's exit codes are in the output)")
        parts += [_phrase(f) for f in first if order[f.kind] > 0]
        return "; ".join(parts) if parts else "no rank left a note (see the output above)"


def _phrase(failure: RankFailure) -> str:
    where = "during set-up" if failure.step is None else f"at step {failure.step}"
    if failure.kind == "peer":
        return f"rank {failure.rank} stopped because its peer left ({where})"
    if failure.kind == "timeout":
        return f"rank {failure.rank} timed out waiting for its peers {where}: {failure.error}"
    return f"rank {failure.rank} failed {where}: {failure.error}"


def _read_note(path: Path) -> RankFailure | None:
    try:
        return RankFailure(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def read_failures(folder: Path) -> LaunchFailure:
    """The notes the ranks of one launch left in ``folder``; a note that cannot be read (cut off as its rank was
    stopped, by a suite from before notes were written whole) leaves its rank among those that vanished."""
    failures = sorted((failure for path in folder.glob("rank*.json") if (failure := _read_note(path)) is not None),
                      key=lambda f: f.rank)
    ended = {f.rank for f in failures} | {int(p.stem[4:]) for p in folder.glob("rank*.done")}
    started = sorted(int(p.stem[4:]) for p in folder.glob("rank*.started"))
    return LaunchFailure(failures, [r for r in started if r not in ended])
