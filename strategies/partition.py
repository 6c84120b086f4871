"""Pure helpers for splitting a model into stages: no processes, no devices, easy to test.

A *balance* is a list of block counts per stage, as in torchgpipe: ``[3, 2, 2]`` puts
blocks 0-2 on stage 0, 3-4 on stage 1 and 5-6 on stage 2.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def check_balance(balance: Sequence[int], num_blocks: int) -> None:
    """Raises ValueError, naming the numbers, unless ``balance`` covers exactly ``num_blocks`` blocks."""
    if not balance:
        raise ValueError("balance is empty")
    if any(n < 1 for n in balance):
        raise ValueError(f"balance {list(balance)} has a stage with fewer than 1 block")
    if sum(balance) != num_blocks:
        raise ValueError(f"balance {list(balance)} sums to {sum(balance)}, but the model has {num_blocks} blocks")


def split_sequential(blocks: nn.Sequential, balance: Sequence[int]) -> list[nn.Sequential]:
    """Cuts ``blocks`` into consecutive stages; the stages share the blocks' modules (no copies)."""
    check_balance(balance, len(blocks))
    stages, start = [], 0
    for count in balance:
        stages.append(nn.Sequential(*(blocks[i] for i in range(start, start + count))))
        start += count
    return stages


def even_balance(num_blocks: int, stages: int) -> list[int]:
    """As equal block counts as possible, the larger stages first: 7 blocks on 3 stages -> [3, 2, 2]."""
    if not 1 <= stages <= num_blocks:
        raise ValueError(f"cannot split {num_blocks} blocks into {stages} stages")
    base, extra = divmod(num_blocks, stages)
    return [base + 1 if i < extra else base for i in range(stages)]


def balance_by_cost(costs: Sequence[float], stages: int) -> list[int]:
    """Contiguous split of blocks with ``costs`` into ``stages`` that minimises the costliest stage.

    The pipeline's throughput is set by its slowest stage, so that is what we minimise
    (the linear-partition problem; exact dynamic programme, O(stages * blocks^2)). Among
    equally good splits it keeps the earliest cut points, so the result is deterministic.
    """
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot split {n} blocks into {stages} stages")
    if any(c < 0 for c in costs):
        raise ValueError(f"block costs must be non-negative, got {list(costs)}")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][i]: the smallest possible max-stage cost for blocks[:i] in k stages.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                worst = max(best[k - 1][j], prefix[i] - prefix[j])
                if worst < best[k][i]:
                    best[k][i], cut[k][i] = worst, j
    balance, i = [], n
    for k in range(stages, 0, -1):
        balance.append(i - cut[k][i])
        i = cut[k][i]
    return balance[::-1]


def parameter_counts(blocks: nn.Sequential) -> list[int]:
    """Parameters per block: the cost model for ``--balance params``."""
    return [sum(p.numel() for p in block.parameters()) for block in blocks]


BALANCE_MODES = ("even", "params", "time")
"""--balance by name: equal block counts, parameter counts, or profiled time per block."""


def explicit_balance(text: str, num_blocks: int, stages: int) -> list[int] | None:
    """``--balance 3,2,2`` checked against the model and the stage count; None for a named mode.

    Raises ValueError, naming the numbers, for a list of the wrong length or sum, or for more
    stages than blocks whatever the mode."""
    if stages > num_blocks:
        raise ValueError(f"cannot split {num_blocks} blocks into {stages} stages")
    if text in BALANCE_MODES:
        return None
    try:
        balance = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--balance {text!r} is neither {', '.join(BALANCE_MODES)} nor a list like 3,2,2") from None
    if len(balance) != stages:
        raise ValueError(f"balance {balance} has {len(balance)} stages, but the run has {stages}")
    check_balance(balance, num_blocks)
    return balance
