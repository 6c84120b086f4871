"""Which GPU a torchrun or Slurm process takes, and which per-node layouts are refused (strategies/distributed.py)."""

from __future__ import annotations

import pytest
import torch

from strategies.distributed import check_per_device_launch, torchrun_topology
from strategies.errors import ConfigError


def _launched(monkeypatch: pytest.MonkeyPatch, rank: int, local_rank: int, world: int, local_world: int,
              visible_gpus: int, cuda_visible: str | None) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    if cuda_visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible_gpus)


@pytest.mark.parametrize(
    ("local_rank", "visible_gpus", "index"),
    [
        (3, 4, 3),  # torchrun: every process sees the node's 4 GPUs
        (0, 4, 0),
        (3, 1, 0),  # Slurm, one GPU per task: local rank 3 sees its own GPU as cuda:0
        (1, 1, 0),
        (5, 4, 1),  # two processes per visible GPU would map so (and NCCL refuses them, not this)
    ],
)
def test_the_device_index_is_the_local_rank_among_the_visible_gpus(
    local_rank: int, visible_gpus: int, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: cuda:LOCAL_RANK, an invalid ordinal for every Slurm task but the first.
    _launched(monkeypatch, local_rank, local_rank, 8, 4, visible_gpus, None)
    topo = torchrun_topology("cuda")
    assert topo.devices == (torch.device("cuda", index),)
    assert (topo.rank, topo.local_rank, topo.world_size) == (local_rank, local_rank, 8)


def test_the_cpu_keeps_one_device_for_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    _launched(monkeypatch, 3, 3, 4, 4, 0, None)
    assert torchrun_topology("cpu").devices == (torch.device("cpu"),)


def test_one_gpu_per_task_is_admitted(monkeypatch: pytest.MonkeyPatch) -> None:
    _launched(monkeypatch, 2, 2, 4, 4, 1, "2")
    check_per_device_launch(4, "cuda", 1)  # before: "4 processes on this node, one per GPU, but ... 1 GPU(s)"


@pytest.mark.parametrize(("cuda_visible", "gpus"), [(None, 1), ("0,1", 2)])
def test_more_processes_than_a_shared_view_of_gpus_is_refused(cuda_visible: str | None, gpus: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _launched(monkeypatch, 0, 0, 4, 4, gpus, cuda_visible)
    with pytest.raises(ConfigError) as refused:
        check_per_device_launch(4, "cuda", gpus)
    assert str(refused.value) == (f"4 processes on this node, one per GPU, but this machine has {gpus} GPU(s); "
                                  f"use at most {gpus} per node")


def test_the_suites_own_launch_is_not_admitted_by_a_single_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # No torchrun variables: the suite starts the ranks itself, all of them under this one view.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ConfigError, match="2 processes on this node"):
        check_per_device_launch(2, "cuda", 1)
