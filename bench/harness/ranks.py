"""Processes that pose as torchrun's ranks: calibration, the fidelity benchmark and the tests start them.

torchrun would start a fresh interpreter per rank for every run; calibration, the fidelity benchmark
and the tests keep one group of ranks for many runs instead (forming a group costs seconds, a tiny
run a fraction of one), so they start the ranks themselves and each calls ``become_rank`` first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, TypeVar, cast

from bench.harness.disturbance import open_window
from bench.harness.processes import die_with_parent
from strategies.distributed import RENDEZVOUS_FILE_VARIABLE

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext
    from multiprocessing.queues import Queue

T = TypeVar("T")


def become_rank(rank: int, world_size: int, folder: str) -> None:
    """Makes this spawned process torchrun's rank ``rank`` of ``world_size`` on this node.

    Sets torchrun's variables and a file rendezvous in ``folder`` (which every rank of the group
    shares), and ties the process's life to its parent's, as ``bench run`` does for its workers."""
    die_with_parent()
    open_window()
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size)
    )
    os.environ[RENDEZVOUS_FILE_VARIABLE] = os.path.join(folder, "rendezvous")


PRELOADED = ["bench.harness.fork_server", "torch", "torch._dynamo", "bench.harness.runner", "strategies", "models",
             "bench.harness.frozen_heap"]
"""What the fork server imports once: what ties its life to its starter's (first), torch, the suite, and
torch._dynamo, which the optimizers' first step imports. A rank started afresh spends 4-5 s of a 2-core
machine on those before its first step; one forked from the server, none. The server only imports: it
holds no thread pool, device or process group for its children to inherit, which is what makes forking
it safe (CUDA included)."""


def rank_context() -> BaseContext:
    """The multiprocessing context ranks start from: forked from a server that imported ``PRELOADED``,
    started on first use and shared by every group this process starts after."""
    import torch.multiprocessing as mp

    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    return context


def start_ranks(target: Callable[..., None], args: tuple, nprocs: int, join: bool = True):  # noqa: ANN201
    """``torch.multiprocessing.start_processes`` of ``nprocs`` ranks from ``rank_context``: each runs
    ``target(rank, *args)``; with ``join``, waits for all and raises the first one's error."""
    import torch.multiprocessing as mp

    rank_context()
    return mp.start_processes(target, args=args, nprocs=nprocs, join=join, start_method="forkserver")


def in_forked_process(function: Callable[..., T], *args: object, timeout_s: float = 600.0) -> T:
    """``function(*args)`` run in one process forked from ``rank_context``'s server, as a run's processes are (a
    fresh heap, the suite's allocator settings), and its result; its exception raised here. ``function`` and
    ``args`` travel pickled: module-level functions, picklable values."""
    context = cast("ForkServerContext", rank_context())  # typed a BaseContext, which typeshed gives no Process
    results = context.Queue()
    process = context.Process(target=_call_and_send, args=(function, args, results))
    process.start()
    try:
        failed, value = results.get(timeout=timeout_s)
    finally:
        process.join(timeout=30)
    if failed:
        raise value
    return value


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside the block and given back after it: a timing run in the
    calling process (on a GPU, ``like_a_run``) leaves that process's own setting as it found it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def like_a_run(accelerator: str, function: Callable[..., T], *args: object, timeout_s: float = 600.0) -> T:
    """``function(*args)`` where its timings meet the memory a run's process meets: on a CPU in a process forked for
    it (``in_forked_process``: a fresh heap, not a long-lived caller's), on a GPU here (the device's caching
    allocator either way, and a forked process would first pay CUDA's start)."""
    if accelerator == "cuda":
        return function(*args)
    return in_forked_process(function, *args, timeout_s=timeout_s)


def _call_and_send(function: Callable[..., object], args: tuple, results: Queue) -> None:
    die_with_parent()
    try:
        results.put((False, function(*args)))
    except Exception as exc:  # raised again where it was asked for
        results.put((True, exc))
