"""Pure helpers for cutting a global batch between replicas: no processes, no devices, easy to test.

Two rules, because PyTorch's two data-parallel wrappers cut batches differently:

    ddp   every rank takes an equal, contiguous shard (the suite insists that N divides the batch,
          so that the mean of the ranks' mean losses is the global mean loss):
              shard_range(12, rank, 3) -> [0, 4), [4, 8), [8, 12)
    dp    nn.DataParallel scatters with Tensor.chunk(N, dim=0), which makes chunks of
          ceil(B / N) and leaves the rest to the last one, so some devices may get nothing:
              chunk_sizes(10, 3) -> [4, 4, 2]      chunk_sizes(10, 8) -> [2, 2, 2, 2, 2]
"""

from __future__ import annotations


def check_divisible(global_batch: int, ranks: int, what: str = "data-parallel ranks") -> None:
    """Raises ValueError, naming both numbers, unless ``ranks`` divides ``global_batch``."""
    if ranks < 1:
        raise ValueError(f"need at least 1 of the {what}, got {ranks}")
    if global_batch % ranks:
        raise ValueError(
            f"global batch {global_batch} is not divisible by {ranks} {what}; "
            f"use a multiple of {ranks}, e.g. {ranks * max(1, global_batch // ranks)}"
        )


def shard_range(global_batch: int, rank: int, world: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous, equal shard of the global batch.

    Contiguous shards keep each rank's samples in the order the single-device reference sees
    them, so concatenating the ranks' shards gives back the global batch exactly.
    """
    check_divisible(global_batch, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    size = global_batch // world
    return rank * size, (rank + 1) * size


def chunk_sizes(batch: int, chunks: int) -> list[int]:
    """The sizes ``Tensor.chunk(chunks, dim=0)`` gives a batch of ``batch`` samples.

    This is the rule nn.DataParallel scatters by: ``scatter`` passes no chunk sizes, so
    torch/csrc/cuda/comm.cpp falls back to ``tensor.chunk(devices.size(), dim)``. Chunks are
    ``ceil(batch / chunks)`` long and there are only as many as that needs, so fewer than
    ``chunks`` devices may get work; DataParallel then replicates to just those.
    """
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if batch < 0:
        raise ValueError(f"batch must be 0 or more, got {batch}")
    if batch == 0:
        return [0] * chunks  # Tensor.chunk keeps the count for an empty dimension
    size = -(-batch // chunks)
    full, rest = divmod(batch, size)
    return [size] * full + ([rest] if rest else [])
