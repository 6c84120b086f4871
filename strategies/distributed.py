"""The raw torch.distributed calls, kept in one place so strategy files read as the algorithm."""

from __future__ import annotations

import datetime
import gc
import os
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch
import torch.distributed as dist

from strategies.base import Topology
from strategies.devices import is_emulated
from strategies.errors import ConfigError


def torchrun_topology(accelerator: str) -> Topology:
    """This process's place in a torchrun launch, read from the variables torchrun sets."""
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", gpu_index(local_rank)) if accelerator == "cuda" else torch.device("cpu")
    return Topology(
        devices=(device,),
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        emulated=is_emulated(accelerator, world_size),
    )


def gpu_index(local_rank: int) -> int:
    """The visible GPU of the process with ``local_rank``: ``local_rank`` where the node's processes see
    all its GPUs (torchrun), 0 where each sees only its own (Slurm's ``--gpus-per-task 1``, whose local
    ranks still count 0..n-1 while every task has one device, cuda:0)."""
    return local_rank % max(torch.cuda.device_count(), 1)


def one_gpu_per_task() -> bool:
    """True where the scheduler gave this process one GPU of its own (CUDA_VISIBLE_DEVICES names one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and len([d for d in visible.split(",") if d.strip()]) == 1


T = TypeVar("T")

RENDEZVOUS_FILE_VARIABLE = "BENCH_RENDEZVOUS_FILE"
"""Names a file for a file:// rendezvous (tests, shared file systems); unset means torchrun's env://."""


BACKENDS = ("auto", "gloo", "nccl")


def default_backend(accelerator: str) -> str:
    """The backend ``--backend auto`` means: nccl on CUDA, gloo on the CPU."""
    return "nccl" if accelerator == "cuda" else "gloo"


def check_backend(backend: str, accelerator: str) -> None:
    """Raises ConfigError for a backend that cannot carry this run's tensors (checked before launch)."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "nccl" and accelerator != "cuda":
        raise ConfigError(
            f"--backend nccl needs CUDA tensors, but this run is on {accelerator} "
            f"(CUDA available: {torch.cuda.is_available()}); use --backend gloo"
        )


def init_process_group(topo: Topology, timeout_s: float, backend: str = "auto") -> None:
    """A process group with an explicit timeout, so that a dead peer ends the run.

    ``backend`` auto is nccl on CUDA and gloo on the CPU; gloo on CUDA works for collectives
    (ddp, slower) but not for point-to-point sends of CUDA tensors (pipelines refuse it).

    On CUDA the device is set first: NCCL binds each rank's communicator to the current device,
    and two ranks left on cuda:0 fail with "Duplicate GPU detected".
    """
    rendezvous_file = os.environ.get(RENDEZVOUS_FILE_VARIABLE)
    if rendezvous_file:
        # One file per torchrun attempt: a restarted worker must not meet the last attempt's keys.
        rendezvous_file += f".attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    init_method = f"file://{rendezvous_file}" if rendezvous_file else "env://"
    device = topo.devices[0]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if backend == "auto":
        backend = default_backend(device.type)
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=topo.rank,
        world_size=topo.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if backend == "nccl" else None,
    )


@contextmanager
def process_group(topo: Topology, timeout_s: float, backend: str = "auto") -> Iterator[None]:
    """The default process group for the body, formed unless the caller already formed one
    (tests and the fidelity benchmark keep one group for several runs), destroyed after it.

    Everything that holds the group must be gone before it is destroyed. DDP's C++ reducer holds
    it, and a reducer freed afterwards runs the group's destructor while holding the GIL: that
    destructor joins gloo's worker threads, one of which may still be releasing a finished
    collective's tensors, which needs the GIL. On torch 2.11 this hung 1 ``bench run`` exit in
    a few. So the body's frames are cleared (also those an exception's traceback keeps alive),
    and the garbage collected, first.
    """
    owner = not is_initialized()
    if owner:
        init_process_group(topo, timeout_s, backend)
    try:
        yield
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        raise
    finally:
        gc.collect()
        if owner:
            destroy_process_group()


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    """True once this process belongs to a default process group."""
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    """Every rank of the default group waits for the others here (nothing outside a process group)."""
    if is_initialized():
        dist.barrier()


def backend() -> str | None:
    """The default group's backend (``nccl``, ``gloo``), or None outside a process group."""
    return str(dist.get_backend()) if is_initialized() else None


def check_per_device_launch(devices: int, accelerator: str, gpus: int) -> None:
    """Raises ConfigError before any process group forms when a one-process-per-device launch
    cannot work: ``--devices`` that disagrees with torchrun's world size, or more processes on
    this node than GPUs (which NCCL would report only later, as "Duplicate GPU detected").

    A launch whose every process sees one GPU of its own (Slurm's one GPU per task) has more processes
    on the node than GPUs in sight and is admitted: two tasks given the same GPU are NCCL's to report."""
    here, own_gpu = devices, False
    if all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        world = int(os.environ["WORLD_SIZE"])
        if devices != world:
            raise ConfigError(
                f"--devices {devices} does not match torchrun's world size {world} "
                f"(--nnodes x --nproc-per-node); pass --devices {world}"
            )
        here = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        own_gpu = one_gpu_per_task()  # only a launch of the user's: the suite's torchrun shares one view
    if accelerator == "cuda" and here > gpus and not (gpus == 1 and own_gpu):
        raise ConfigError(
            f"{here} processes on this node, one per GPU, but this machine has {gpus} GPU(s); "
            f"use at most {gpus} per node"
        )


def check_sync_batchnorm(sync: bool, model: str, devices: int, layer_types: Sequence[str]) -> None:
    """Raises ConfigError where ``--sync-batchnorm`` would change nothing yet be recorded as on: a model
    without BatchNorm, or one replica (SyncBatchNorm then falls back to BatchNorm's local statistics).
    Where it can run (CUDA, 2 or more replicas) it does; the CPU is ddp's to refuse (torch rejects it)."""
    if not sync:
        return
    if not any("BatchNorm" in t for t in layer_types):
        raise ConfigError(f"--sync-batchnorm: model {model!r} has no BatchNorm layer to synchronise; drop the flag")
    if devices < 2:
        raise ConfigError(f"--sync-batchnorm with --devices {devices}: one replica has no other batch statistics "
                          "to gather; use --devices 2 or more")


def gather_objects(obj: T) -> list[T]:
    """Every rank's ``obj`` on every rank (just ``[obj]`` outside a process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list[T] = [obj] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_reduce_mean(tensors: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Averages ``tensors`` (one dtype, one device) in place over ``group`` with one collective.

    SUM then divide rather than ReduceOp.AVG, which gloo lacks."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    flat = _flatten_dense_tensors(tensors)
    dist.all_reduce(flat, group=group)
    flat.div_(dist.get_world_size(group))
    for tensor, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors), strict=True):
        tensor.copy_(reduced)


def broadcast_from_first(tensors: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Overwrites ``tensors`` with the first rank of ``group``'s (one collective per tensor)."""
    source = dist.get_global_rank(group, 0)
    for tensor in tensors:
        dist.broadcast(tensor, src=source, group=group)
