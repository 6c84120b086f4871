"""Predicted bytes per device by kind, as bench/memory.py measures them, from the calibration's counts.

fp32 state: 4 bytes per parameter of each kind a device holds (parameters, gradients, one state per
parameter for SGD with momentum, two for Adam), divided as the strategy shards it; activations: what
each block's forward saves for backward (counted on the meta device) times the samples a device holds
at once (a pipeline stage holds its micro-batches in flight: all m under GPipe, at most p - rank under
1F1B and the other schedules).
"""

from __future__ import annotations

from bench.predict.calibration import BlockCost
from bench.predict.scenario import Scenario

FP32 = 4


def optimizer_states(optimizer: str) -> int:
    """Tensors of state per parameter: SGD with momentum keeps one, Adam two."""
    return 2 if optimizer == "adam" else 1


def predict_memory(blocks: list[BlockCost], scenario: Scenario, states: int,
                   stages: list[list[int]] | None = None, gathered_bytes: int = FP32) -> dict[str, int]:
    """{kind: bytes} on the device that holds the most; ``gathered_bytes`` per parameter FSDP gathers (2 under
    bf16 mixed precision on a GPU profile: FSDP2's param_dtype)."""
    n = scenario.devices
    parameters = sum(b.parameters for b in blocks)
    saved = sum(b.saved_bytes_per_sample for b in blocks)
    name = scenario.strategy
    if name in ("single", "dp"):
        return _kinds(parameters, parameters, states * parameters, saved * scenario.global_batch)
    if name in ("ddp", "zero1"):
        optimizer = states * parameters / (n if name == "zero1" else 1)
        by_kind = _kinds(parameters, parameters, optimizer, saved * scenario.global_batch / n)
        by_kind["temporaries"] = FP32 * parameters  # DDP's buckets hold a copy of the gradients
        return _with_total(by_kind)
    if name == "fsdp":
        by_kind = _kinds(parameters / n, parameters / n, states * parameters / n, saved * scenario.global_batch / n)
        largest = max(b.parameters for b in blocks)
        gathered = largest if scenario.reshard_after_forward else parameters
        by_kind["gathered_parameters"] = int(gathered_bytes * gathered)
        return _with_total(by_kind)
    if name == "tp":
        sharded = sum(blocks[i].parameters for i in scenario.tp_blocks)
        local = parameters - sharded * (1 - 1 / n)
        return _kinds(local, local, states * local, saved * scenario.global_batch)
    if name in ("mp", "pp", "hybrid") and stages:
        return _largest_stage(blocks, scenario, states, stages)
    raise ValueError(f"no memory model for strategy {name!r}")


def _largest_stage(blocks: list[BlockCost], scenario: Scenario, states: int, stages: list[list[int]]) -> dict[str, int]:
    replicas = (scenario.dp or 1) if scenario.strategy == "hybrid" else 1
    ranks = len(stages) // scenario.stages_per_rank
    m = scenario.microbatches
    micro = scenario.global_batch / replicas / m
    best: dict[str, int] = {}
    for rank in range(ranks):
        mine = [i for s in range(rank, len(stages), ranks) for i in stages[s]]
        held = sum(blocks[i].parameters for i in mine)
        in_flight = m if scenario.strategy == "mp" or scenario.schedule == "gpipe" else min(m, ranks - rank)
        by_kind = _kinds(held, held, states * held, sum(blocks[i].saved_bytes_per_sample for i in mine) * micro
                         * in_flight)
        if by_kind["total"] > best.get("total", -1):
            best = by_kind
    return best


def _kinds(parameters: float, gradients: float, optimizer: float, activations: float) -> dict[str, int]:
    return _with_total({"parameters": int(FP32 * parameters), "gradients": int(FP32 * gradients),
                        "optimizer_state": int(FP32 * optimizer), "activations": int(activations)})


def _with_total(by_kind: dict[str, int]) -> dict[str, int]:
    """``by_kind`` with ``total``, the sum of every other kind (a kind added later counts: DDP's buckets once
    sat outside the total, 24% under the tracker's figure for ddp on the small mlp)."""
    return {**{k: int(v) for k, v in by_kind.items() if k != "total"},
            "total": sum(int(v) for k, v in by_kind.items() if k != "total")}
