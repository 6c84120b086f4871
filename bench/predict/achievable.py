"""A training step on a GPU cluster at achievable speed: the time and peak memory of one published configuration.

Compute (per GPU, per micro-batch), each kind of work at its own achievable share (profiles.SHARES):

    matmuls        FLOPs / (peak[precision] x share.matmul)         2 x in x out per token per Linear, x3 fwd+bwd
    attention      FLOPs / (peak x share.attention)                 causal: 2 s d per token fwd, bwd 2.5 x fwd
    elementwise    bytes / (HBM x share.hbm)                        norms, activations, residual adds, rope, loss
    recompute      full: every layer's forward again; selective (torchtitan's op policy): every other matmul's
                   forward and the elementwise work, not attention
    launches       at least LAUNCH_S per kernel (the host issues them one by one, eager)

torch.compile fuses chains of elementwise kernels: each chain reads its inputs and writes its output once
(COMPILE_ELEMENTWISE of the eager bytes remain). FSDP's all-gathers and reduce-scatters run beside the
compute, one layer ahead (a layer lasts as long as the longer of the two); DDP's all-reduce hides behind
the backward but for the last bucket. All FLOP counts are from the model built on the meta device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.predict.nccl import Link, collective_seconds
from bench.predict.profiles import GIB, SHARES, Gpu
from models.cnn import build_resnet
from models.decoder import DecoderDims, build_decoder, linear_shapes

LAUNCH_S = 4e-6
"""The host's cost of one eager kernel launch (NVIDIA's CUDA best-practices guide: a few microseconds)."""
COMPILE_ELEMENTWISE = 0.3
"""What is left of the elementwise bytes under torch.compile: fitted to train.csv tt-l31-8b-fsdp8-h100-compile
against tt-l31-8b-fsdp8-h100-bf16 (the same run without compile)."""
KERNELS_PER_LAYER = 60
"""Kernels one decoder layer launches forward and backward, eager (norms, projections, attention, adds)."""
ALLOCATOR_RESERVE = 1.2
"""Reserved over allocated bytes in PyTorch's caching allocator (torchtitan reports the reserved peak): fitted
to train.csv tt-l31-8b-fsdp8-h100-bf16-mem and tt-l31-8b-fsdp128-h100-bf16-mem."""
INPUT_IMAGES_PER_S_PER_NODE = 16_621.0
"""The most images/s one node's input pipeline (DALI decode and augment, DeepLearningExamples) feeds:
fitted to train.csv dle-rn50-a100-8-amp, the one row where compute alone predicts more."""
ELEMENTWISE_PASSES = 8
"""Times a normalisation's or activation's output crosses HBM in a step: written and read forward (2),
read twice and its gradient written and read backward (4), BatchNorm's statistics pass over it again (2)."""
ELEMENTWISE = (torch.nn.BatchNorm2d, torch.nn.GroupNorm, torch.nn.LayerNorm, torch.nn.ReLU, torch.nn.GELU)
"""The memory-bound modules whose outputs ``ELEMENTWISE_PASSES`` counts."""
BYTES = {"tf32": 4, "amp-fp16": 2, "bf16": 2, "bf16-pure": 2}


@dataclass(frozen=True)
class Mesh:
    """A row's parallelism and batch: the mesh, micro-batches and what the run turned on."""

    gpus: int
    gpus_per_node: int
    dp: int
    dp_shard: int
    micro_batch: int
    grad_accum: int
    precision: str
    checkpointing: str
    compile: bool


@dataclass(frozen=True)
class StepEstimate:
    """PREDICTED: one optimizer step's seconds and its parts, and the peak bytes on one GPU."""

    step_s: float
    compute_s: float
    exposed_comm_s: float
    memory_bytes: float
    efficiencies: dict[str, float]


def _compute_precision(precision: str) -> str:
    return {"tf32": "tf32", "amp-fp16": "fp16"}.get(precision, "bf16")


def transformer_step(dims: DecoderDims, mesh: Mesh, gpu: Gpu, network: Link | None) -> StepEstimate:
    """One step of a decoder under FSDP (``dp_shard`` ranks) with ``grad_accum`` micro-batches."""
    shares = SHARES[gpu.architecture]
    peak = gpu.peak_flops[_compute_precision(mesh.precision)]
    tokens = mesh.micro_batch * dims.seq_len
    with torch.device("meta"):
        model = build_decoder(dims)
    layer_linears = sum(i * o for i, o in linear_shapes(model[1]))
    head = dims.width * dims.vocab
    layer_parameters = sum(p.numel() for p in model[1].parameters())
    parameters = sum(p.numel() for p in model.parameters())
    # Forward FLOPs of one layer and the head for the micro-batch.
    matmul_fwd = 2 * tokens * layer_linears
    attention_fwd = 2 * tokens * dims.seq_len * dims.width  # QK^T and AV, 4 s d a token, halved by the mask
    recompute = {"full": 1.0, "selective": 0.5}.get(mesh.checkpointing, 0.0)
    matmul_share = shares.matmul_at(dims.width)
    matmul_s = matmul_fwd * (3 + recompute) / (peak * matmul_share)
    attention_s = attention_fwd * (1 + 2.5 + (1.0 if mesh.checkpointing == "full" else 0.0)) / (
        peak * shares.attention)
    eager = elementwise_bytes_per_token(dims) * tokens * (3 + (1.0 if recompute else 0.0))
    fused = eager * (COMPILE_ELEMENTWISE if mesh.compile else 1.0)
    elementwise_s = fused / (gpu.hbm_bytes_per_s * shares.hbm)
    launches = 0.0 if mesh.compile else KERNELS_PER_LAYER * LAUNCH_S
    layer_s = max(matmul_s + attention_s + elementwise_s, launches)
    head_s = 6 * tokens * head / (peak * matmul_share) + tokens * dims.vocab * 20 / (gpu.hbm_bytes_per_s * shares.hbm)
    # FSDP: each layer gathered forward and again backward (resharded after forward), its gradients
    # reduce-scattered; bf16 gathers, gradients reduced in fp32 unless the weights are bf16 too.
    n = mesh.dp_shard
    grad_bytes = 2 if mesh.precision == "bf16-pure" else 4
    gather = collective_seconds("all_gather", 2 * layer_parameters, n, mesh.gpus_per_node, gpu.nvlink, network)
    scatter = collective_seconds("reduce_scatter", grad_bytes * layer_parameters, n, mesh.gpus_per_node,
                                 gpu.nvlink, network)
    comm_layer = 2 * gather + scatter
    per_layer = max(layer_s, comm_layer)
    micro_s = dims.layers * per_layer + head_s + gather
    optimizer_s = parameters / n * 28 / (gpu.hbm_bytes_per_s * shares.hbm)  # AdamW: 4 fp32 reads, 3 writes
    step_s = mesh.grad_accum * micro_s + optimizer_s
    compute = mesh.grad_accum * (dims.layers * layer_s + head_s)
    return StepEstimate(step_s, compute, step_s - compute - optimizer_s,
                        transformer_memory(dims, mesh, parameters, layer_parameters),
                        {"matmul": matmul_share, "attention": shares.attention, "hbm": shares.hbm})


def elementwise_bytes_per_token(dims: DecoderDims) -> float:
    """Bytes a layer's memory-bound kernels move per token forward (bf16): each norm reads and writes d,
    each residual add reads 2d and writes d, RoPE reads and writes q and k, SwiGLU's silu and product
    read 3 and write 2 of the hidden width (GELU reads and writes it once). The backward moves about
    twice the forward's bytes (it reads the saved input and the incoming gradient, writes one)."""
    d, f = dims.width, dims.ffn
    elements = 2 * 2 * d + 2 * 3 * d + (2 * (d + dims.kv_width) if dims.positions == "rope" else 0)
    elements += 5 * f if dims.ffn_kind == "swiglu" else 2 * f
    return 2 * elements


def transformer_memory(dims: DecoderDims, mesh: Mesh, parameters: int, layer_parameters: int) -> float:
    """Peak bytes on one GPU: the sharded fp32 state, two layers gathered in bf16 and one layer's fp32
    gradients, the activations each layer keeps for backward under the checkpointing policy, one
    layer's whole activations while it recomputes, and the logits with their fp32 copy and gradient,
    all times the allocator's reserve."""
    d, kv, f = dims.width, dims.kv_width, dims.ffn
    hidden = 4 * f if dims.ffn_kind == "swiglu" else 2 * f
    whole = 6 * d + 2 * kv + hidden  # elements a layer saves per token with no checkpointing
    saved = {"full": d, "selective": 2 * d + (3 * d + 2 * kv + (2 if dims.ffn_kind == "swiglu" else 1) * f) / 2}
    tokens = mesh.micro_batch * dims.seq_len
    state = 16 * parameters / mesh.dp_shard if mesh.precision != "bf16-pure" else 8 * parameters / mesh.dp_shard
    buffers = 2 * 2 * layer_parameters + 4 * layer_parameters + 2 * 2 * dims.width * dims.vocab
    activations = 2 * tokens * (dims.layers * saved.get(mesh.checkpointing, whole) + whole)
    # bf16 logits, their fp32 copy for the loss and its fp32 gradient; compiled, the copy fuses into the loss.
    logits = tokens * dims.vocab * (2 + (0 if mesh.compile else 4) + 4)
    return (state + buffers + activations + logits) * ALLOCATOR_RESERVE


@functools.cache
def resnet_counts(block: str, layers: tuple[int, ...], groups: int, width: int, image: int,
                  classes: int) -> tuple[float, float, int]:
    """Per image: forward FLOPs (torch's counter on the meta device), the bytes of every BatchNorm, ReLU
    and residual output in fp32 elements, and the parameter count."""
    with torch.device("meta"):
        blocks = build_resnet(block, layers, groups, width, classes)
        outputs = []

        def count(_module: torch.nn.Module, _inputs: object, output: torch.Tensor) -> None:
            outputs.append(output.numel())

        hooks = [m.register_forward_hook(count) for m in blocks.modules() if isinstance(m, ELEMENTWISE)]
        counter = FlopCounterMode(display=False)
        with counter:
            blocks(torch.empty(2, 3, image, image))
        for h in hooks:
            h.remove()
        parameters = sum(p.numel() for p in blocks.parameters())
    return counter.get_total_flops() / 2, sum(outputs) / 2, parameters


def resnet_step(dims: dict[str, str], mesh: Mesh, gpu: Gpu) -> StepEstimate:
    """One step of a ResNet under DDP: convolutions at the architecture's share of the precision's peak,
    BatchNorm/ReLU/adds at its share of HBM (each output written and read forward, three times backward),
    the gradient all-reduce's last bucket exposed."""
    shares = SHARES[gpu.architecture]
    layers = tuple(int(x) for x in dims["layers"].split("-"))
    flops, elements, parameters = resnet_counts(dims["block"], layers, int(dims["groups"]),
                                                int(dims["width_per_group"]), int(dims["image"]),
                                                int(dims["classes"]))
    precision = _compute_precision(mesh.precision)
    share = shares.convolution_tf32 if precision == "tf32" else shares.convolution
    conv_s = 3 * flops * mesh.micro_batch / (gpu.peak_flops[precision] * share)
    elementwise_s = elements * BYTES[mesh.precision] * ELEMENTWISE_PASSES * mesh.micro_batch / (
        gpu.hbm_bytes_per_s * shares.hbm)
    compute = conv_s + elementwise_s
    last_bucket = collective_seconds("all_reduce", 25 * 2**20, mesh.dp, mesh.gpus_per_node, gpu.nvlink, None)
    optimizer_s = parameters * 20 / (gpu.hbm_bytes_per_s * shares.hbm)  # SGD momentum: 3 reads, 2 writes, fp32
    step = (compute + last_bucket) * mesh.grad_accum + optimizer_s
    return StepEstimate(step, compute, last_bucket, 0.0,
                        {"convolution" if precision != "tf32" else "convolution_tf32": share, "hbm": shares.hbm})


def images_per_s(step: StepEstimate, mesh: Mesh) -> float:
    """The job's images/s: every replica's batch per step, no more than its nodes' input pipelines feed."""
    nodes = max(1, mesh.gpus // mesh.gpus_per_node)
    computed = mesh.gpus * mesh.micro_batch * mesh.grad_accum / step.step_s
    return min(computed, INPUT_IMAGES_PER_S_PER_NODE * nodes)


__all__ = ["GIB", "Mesh", "StepEstimate", "images_per_s", "resnet_step", "transformer_step"]
