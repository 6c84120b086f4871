"""Which blocks each pipeline stage holds, and what the rank holding the most keeps in memory: a split as the cost
models see it (pp's and hybrid's in strategies/pipeline_cost.py, mp's in strategies/model_parallel.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from strategies.cost_model import BlockCosts, Scenario, whole_pass
from strategies.partition import balance_by_cost, even_balance, explicit_balance
from strategies.step_memory import by_kind


class StageHolding(Protocol):
    """What a pipeline's cost model says one rank holds of its stages (strategies/pipeline_cost.py's PipelineCost)."""

    def tensor_parallel(self, scenario: Scenario) -> int: ...

    def local_parameters(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> float: ...

    def gathered(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> dict[str, float]: ...


def stage_blocks(blocks: Sequence[BlockCosts], balance: str, stages: int, samples: float) -> list[list[int]]:
    """Which blocks each stage holds under ``--balance`` (strategies/partition.py's rules)."""
    sizes = explicit_balance(balance, len(blocks), stages)
    if sizes is None:
        if balance == "params":
            sizes = balance_by_cost([b.parameters for b in blocks], stages)
        elif balance == "time":
            sizes = balance_by_cost([sum(whole_pass(blocks, [i], samples)) for i in range(len(blocks))], stages)
        else:
            sizes = even_balance(len(blocks), stages)
    starts = [sum(sizes[:s]) for s in range(stages)]
    return [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]


def largest_stage(blocks: Sequence[BlockCosts], scenario: Scenario, states: int, replicas: int,
                  all_in_flight: bool, model: StageHolding | None = None) -> dict[str, int]:
    """{kind: bytes} of the pipeline rank that holds the most: its stages' state (what ``model`` says one
    rank holds of them: all of it but for hybrid's tp and FSDP shards), and the activations of the
    micro-batches in flight (all m under GPipe's fill and drain, at most p - rank under the others)."""
    tp = model.tensor_parallel(scenario) if model else 1
    ranks = scenario.devices // (replicas * tp)
    m = scenario.microbatches
    micro = scenario.global_batch / replicas / m
    stages = stage_blocks(blocks, scenario.balance, ranks * scenario.stages_per_rank, micro)
    best: dict[str, int] = {}
    for rank in range(ranks):
        mine = [i for s in range(rank, len(stages), ranks) for i in stages[s]]
        held = model.local_parameters(blocks, mine, scenario) if model else sum(blocks[i].parameters for i in mine)
        in_flight = m if all_in_flight else min(m, ranks - rank)
        kinds = by_kind(held, held, states * held, sum(blocks[i].saved_bytes_per_sample for i in mine) * micro
                        * in_flight, **(model.gathered(blocks, mine, scenario) if model else {}))
        if kinds["total"] > best.get("total", -1):
            best = kinds
    return best
