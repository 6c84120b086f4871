"""``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``), one process per device, started by torchrun.

Each rank keeps 1/N of every parameter, its gradient and its optimizer state (ZeRO, Rajbhandari et
al. 2020). A block's whole parameters exist only while it computes:

    forward of block b    all-gather b's shards -> compute -> free them (ZeRO-3) or keep them (ZeRO-2)
    backward of block b   (all-gather again, ZeRO-3) -> compute -> reduce-scatter b's gradients into shards
    optimizer step        each rank updates its own shards: no communication

Every block is sharded on its own, then the root (what is left: none here, the blocks are the
model), as torchtitan's ``apply_fsdp`` does, so that one block's gather overlaps the previous
block's compute. The batch is split as in ``ddp``; a reduce-scatter of the mean gradient is the
all-reduce's result, sharded, so N ranks train like one device (tests/test_sharded.py).

bf16 is autocast, as in every other strategy (hybrid's FSDP included): fp32 parameters gathered and
reduced, matmuls and convolutions in bf16, norm layers in fp32. FSDP2's ``MixedPrecisionPolicy`` would
instead cast the parameters themselves, norm layers too, and a sweep's fsdp row would compare other
arithmetic than its ddp row (tests/test_fsdp.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology
from strategies.cost_model import (
    FP32,
    BlockCosts,
    CostModel,
    CostSource,
    Scenario,
    StepPrediction,
    own_overhead,
    partly_hidden,
    threads_per_process,
)
from strategies.distributed import backend
from strategies.errors import ConfigError
from strategies.options import FSDPOptions, ModelFacts, RunOptions
from strategies.shards import check_divisible, shard_range
from strategies.step_memory import by_kind, peak_bytes

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# FSDP2 warns when a sharded module returns a view (a Linear over (n, seq, width) does): an in-place op
# on it would skip the backward's all-gather. The suite's models and losses only read a block's output
# (a model of one's own that writes into one would fail bench verify against single).
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(\w+\) returned a view tensor", category=UserWarning)

ZERO_STAGE = {True: "ZeRO-3", False: "ZeRO-2"}
"""What --reshard-after-forward makes FSDP2: parameters freed after the forward, or kept to the backward."""


def apply_fsdp(blocks: nn.Sequential, device: torch.device, *, reshard_after_forward: bool = True) -> nn.Module:
    """Shards each block of ``blocks`` and then the root over all ranks (the process group must exist)."""
    from torch.distributed.device_mesh import init_device_mesh

    blocks = blocks.to(device)
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    shard_blocks(blocks, blocks, mesh, reshard_after_forward=reshard_after_forward)
    return blocks


def shard_blocks(blocks: nn.Sequential, root: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool = True
                 ) -> None:
    """fully_shard each block of ``blocks`` over ``mesh``, then ``root`` (``blocks`` itself, or a module
    around them), in place. A 2-D mesh (replicate, shard) makes it HSDP. Parameters stay fp32 (bf16 is
    the step's autocast)."""
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        if any(p.requires_grad for p in block.parameters()):
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    # The root's own parameters: none left here, but the root also runs the last reduce-scatters.
    fully_shard(root, mesh=mesh, reshard_after_forward=reshard_after_forward)


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state (each shard gathered), keyed like ``ModelSpec.blocks``; every rank must call."""
    return {key: value.full_tensor() if hasattr(value, "full_tensor") else value
            for key, value in model.state_dict().items()}


class ShardedCost(CostModel):
    """Each block's all-gather before its forward (and, with ZeRO-3, before its backward) on a communication
    stream that runs one block ahead; each block's gradients reduce-scattered after its backward; the
    update of the shard."""

    residual = "fsdp_per_block"

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        return blocks

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        n = scenario.devices
        threads = threads_per_process(n)
        blocks, slow = costs.blocks(threads), costs.slowdown_for(n)
        samples = scenario.global_batch / n
        gather = [costs.collective_ms("all_gather", b.parameters * FP32 / n, n) for b in blocks]
        reduce = [costs.collective_ms("reduce_scatter", b.parameters * FP32, n) for b in blocks]
        forward = [b.forward_ms.at(samples) * slow for b in blocks]
        backward = [b.backward_ms.at(samples) * slow for b in blocks]
        # One communication stream, one block ahead of the compute: block i's all-gather may start once
        # the previous all-gather is done and block i-1 has started computing.
        comm = compute = started = 0.0
        for i in range(len(blocks)):
            comm = max(comm, started) + gather[i]
            started = max(compute, comm)
            compute = started + forward[i]
        for i in reversed(range(len(blocks))):
            # ZeRO-3 gathers every block again, the last one too: each is its own FSDP module, and FSDP2 keeps
            # a module gathered from forward to backward only where it is the root (tests/test_comm.py counts
            # 2 x the parameters' bytes on 2 ranks: the forward's and the backward's gathers, the scatter)
            if scenario.reshard_after_forward:
                comm = max(comm, started) + gather[i]
            started = max(compute, comm)
            compute = started + backward[i]
            comm = max(comm, compute) + reduce[i]
        overhead = (own_overhead(costs, threads, samples) * slow
                    + costs.runtime_for(n, scenario.global_batch)[self.residual] * len(blocks))
        # FSDP2 copies each shard into the all-gather's buffer and the gathered block out of it, and each
        # block's gradients into the reduce-scatter's: about 2 passes over a block's bytes per collective.
        gathered = 2 if scenario.reshard_after_forward else 1
        overhead += sum(costs.copy_ms(threads, 2 * FP32 * b.parameters) for b in blocks) * (gathered + 1) * slow
        busy = sum(forward) + sum(backward) + overhead
        regathers = sum(gather) if scenario.reshard_after_forward else 0.0
        exposed = partly_hidden(max(comm, compute) - (busy - overhead), sum(gather) + regathers + sum(reduce),
                                costs.overlap_for(n))
        end = busy + exposed
        update = costs.optimizer_ms(threads, sum(b.parameters for b in blocks) / n) * slow
        return StepPrediction(end + update, busy, end - busy, update)

    def batch_share(self, scenario: Scenario) -> float:
        return 1 / scenario.devices

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        """The rank's shards, and at the step's peak what FSDP2 holds beyond them (``held_at``); gathered
        parameters and temporaries are those of the peak's moment, as the tracker reads them."""
        n = scenario.devices
        parameters, samples = sum(b.parameters for b in blocks), scenario.global_batch / n
        saved = [b.saved_bytes_per_sample * samples for b in blocks]
        logits = blocks[-1].output_bytes_per_sample * scenario.global_batch / n if blocks else 0.0
        moments = held_at([b.parameters for b in blocks], saved, n, scenario.reshard_after_forward, gathered_bytes,
                          logits, [peak_bytes(p, samples, gathered_bytes) for p in scenario.backward_peaks])
        peak = max(moments, key=lambda held: sum(held.values()))
        kinds = by_kind(parameters / n, parameters / n, states * parameters / n, sum(saved),
                        gathered_parameters=peak["gathered_parameters"], temporaries=peak["temporaries"])
        # The total is the peak moment's, not by_kind's larger of the forward's end and the optimizer step.
        return {**kinds, "total": int(kinds["parameters"] + kinds["optimizer_state"] + sum(peak.values()))}


def held_at(sizes: Sequence[int], saved: Sequence[float], n: int, zero3: bool, gathered_bytes: int = FP32,
            logits: float = 0.0, peaks: Sequence[tuple[float, float, float]] = ()) -> list[dict[str, float]]:
    """Bytes a rank holds beyond its parameter and optimizer-state shards at each moment a step may peak: each
    block's forward, the loss's backward, each block's backward, and the optimizer step. ``sizes``: each block's
    parameters; ``saved``: the bytes each block's forward keeps for its backward on this rank; ``logits``: the
    last block's output on this rank, the size of the two gradients the loss's backward holds (strategies/
    step_memory.py moments_by_kind).

    FSDP2 gathers a block for its forward and frees it after (ZeRO-3) or keeps it to its backward (ZeRO-2). As
    a block's forward starts it copies the block out of the all-gather's buffer while the previous block's buffer
    is still held: the block twice (buffer and copy), the previous block's buffer beside it. Measured
    (FSDPMemTracker, small models on 2 and 4 gloo ranks): ZeRO-2 peaks there on the cnn, the mlp and the 4-rank
    transformer, the earlier blocks gathered beside the two buffers (cnn: 24.6 + 14.0 + 18.0 MiB of gathered
    parameters, as tracked to 0.01 MiB) and the block's copy counted among the activations at that moment (not in
    the activations scored, read at the loss).
    In the backward FSDP2 gathers the next block while this one computes (ZeRO-3), makes this block's whole
    gradients, copies them into the reduce-scatter's buffer, and frees the previous block's buffer only when this
    one's scatter starts. Measured (cnn small on 2 ranks, ZeRO-3): the peak in block 7's backward held blocks 7
    and 6 gathered (19.4 MB), block 7's gradients and block 8's buffer (33.8 MB), the gradient shards of blocks 8
    and 9 and the activations of blocks 0-7; this sum gives its 91.8 MB within 0.3%.
    Where ``peaks`` counted each block's backward at its largest moment (its own activations still held, its own
    gradients made, its temporaries: models/backward_peaks.py), the block's moment is that one, its gradients
    whole-sized until scattered and counted with the temporaries as FSDPMemTracker does. At the block's end
    instead, the small transformer's last layer on 4 ranks held 4.02 MiB of temporaries predicted against 3.26
    tracked (its peak is as its MLP's second Linear makes its gradients: 2.25, and the head's scatter buffer).
    """
    blocks = len(sizes)

    def size(i: int) -> int:
        return sizes[i] if 0 <= i < blocks else 0

    def kept_before(i: int) -> float:
        return 0.0 if zero3 else gathered_bytes * sum(sizes[:i])

    moments = [{"activations": sum(saved[:i]), "gathered_parameters": kept_before(i)
                + gathered_bytes * (size(i - 1) + size(i)), "block_copied_out": gathered_bytes * size(i)}
               for i in range(blocks)]
    # The loss's backward: the transformer's ZeRO-2 peak on 2 ranks, every block still gathered (67.31 MiB tracked,
    # as this gives; the forward's last block, the peak predicted without it, 66.3)
    moments.append({"activations": sum(saved) - logits, "temporaries": 2 * logits,
                    "gathered_parameters": gathered_bytes * size(blocks - 1) if zero3 else kept_before(blocks)})
    for i in reversed(range(blocks)):
        gathered = gathered_bytes * (size(i) + size(i - 1)) if zero3 else kept_before(i + 1)
        scattered = FP32 * sum(sizes[i + 1:]) / n
        if peaks:
            activations, made, temporaries = peaks[i]
            moments.append({"activations": sum(saved[:i]) + activations, "gathered_parameters": gathered,
                            "temporaries": made + temporaries + FP32 * size(i + 1), "gradients": scattered})
        else:
            moments.append({"activations": sum(saved[:i + 1]), "gathered_parameters": gathered,
                            "temporaries": FP32 * (size(i) + size(i + 1)), "gradients": scattered})
    moments.append({"gradients": FP32 * sum(sizes) / n})
    return [{"activations": 0.0, "gathered_parameters": 0.0, "temporaries": 0.0, "gradients": 0.0,
             "block_copied_out": 0.0, **m} for m in moments]


class FSDPStrategy(Strategy):
    """FSDP2: parameters, gradients and optimizer state sharded over the ranks, gathered block by block."""

    name = "fsdp"
    cost_model = ShardedCost()
    splits_the_batch = True
    min_devices = 2  # sharded over one rank, nothing is sharded
    launch = Launch.PER_DEVICE
    description = "FSDP2 (fully_shard): one process per device; --no-reshard-after-forward for ZeRO-2"
    reads: ClassVar[tuple[type, ...]] = (FSDPOptions,)
    fp16_refusal = ("needs a gradient scaler that unscales sharded gradients, not tested here with FSDP2; "
                    "use --precision bf16 (no loss scaling needed)")
    compile_refusal = "the suite compiles blocks before wrapping; fully_shard over compiled blocks is not tested here"

    def __init__(self, run: RunOptions, *, fsdp: FSDPOptions) -> None:
        super().__init__(run)
        self.fsdp = fsdp

    def validate(self, facts: ModelFacts) -> None:
        batch, ranks = self.run.global_batch, self.run.devices
        try:
            check_divisible(batch, ranks)
        except ValueError as exc:
            raise ConfigError(f"{exc} (--batch-size {batch}, --devices {ranks})") from None

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return apply_fsdp(spec.blocks, topo.devices[0], reshard_after_forward=self.fsdp.reshard_after_forward)

    def shard_batch(
        self, inputs: torch.Tensor, targets: torch.Tensor, topo: Topology
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start, stop = shard_range(len(inputs), topo.rank, topo.world_size)
        return super().shard_batch(inputs[start:stop], targets[start:stop], topo)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return full_state(model)

    def record_fields(self, model: nn.Module, per_rank: Sequence[object]) -> dict[str, Any]:
        return {
            "backend": backend(),
            "per_rank_batch_size": self.run.global_batch // self.run.devices,
            "reshard_after_forward": self.fsdp.reshard_after_forward,
            "zero_stage": ZERO_STAGE[self.fsdp.reshard_after_forward],
            # What FSDP2 itself gathers and reduces in: fp32 always; bf16 is the record's autocast precision.
            "mixed_precision": {"param_dtype": "float32", "reduce_dtype": "float32",
                                "autocast_dtype": "bfloat16" if self.run.precision == "bf16" else None},
        }
