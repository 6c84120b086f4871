"""Hardware the run cannot see: GPU profiles on their fabrics, and a cost source built from one (PREDICTED).

Compute: each block's forward at its kinds' achievable shares (bench/predict/profiles.py): its FLOPs
(torch's counter on the meta device) over the precision's dense peak times the matmul share at the
block's width (the convolution share for a ResNet's blocks), plus its normalisations' and activations'
outputs crossing HBM (achievable.ELEMENTWISE_PASSES times a step) at the achievable bandwidth, and
never under its kernels' launches (``LAUNCH_S`` each); the backward twice the forward's FLOPs and
bytes. The update reads and writes the fp32 state at the achievable HBM bandwidth.

Communication as NCCL runs it (bench/predict/nccl.py): rings inside a node of 8 over NVLink, across
nodes each GPU's NIC carrying its 1/8 of the ring's bytes; a pipeline's neighbours over the one link
between their two ranks. FSDP gathers bf16 parameters under bf16 (mixed precision), the gradients stay
fp32 (all-reduce, reduce-scatter).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import models
from bench.predict.achievable import ELEMENTWISE, ELEMENTWISE_PASSES, LAUNCH_S
from bench.predict.calibration import BlockCost, Line
from bench.predict.nccl import Link, collective_seconds, p2p_seconds
from bench.predict.profiles import FABRICS, GPUS, NDR_400, SHARES, Gpu, Shares
from models.sizes import COUNT_BATCH, output_bytes_per_sample, parameter_counts, saved_bytes_per_sample, tensor_counts
from strategies import ConfigError
from strategies.cost_model import RuntimeOverheads

PRECISIONS = ("bf16", "tf32", "fp32")


@dataclass(frozen=True)
class Hardware:
    """A GPU part in nodes of ``node_size`` with ``network`` between the nodes (None: one node only)."""

    key: str
    gpu: Gpu
    network: Link | None
    node_size: int = 8

    @property
    def name(self) -> str:
        return self.gpu.name

    @property
    def memory_bytes(self) -> float:
        return self.gpu.memory_bytes

    @property
    def shares(self) -> Shares:
        return SHARES[self.gpu.architecture]

    @property
    def source(self) -> str:
        network = self.network.source if self.network else "one node, no network"
        return f"{self.gpu.source}; {self.gpu.nvlink.source}; {network}"


PROFILES = {
    **{key: Hardware(key, gpu, NDR_400) for key, gpu in GPUS.items()},
    "h100": Hardware("h100", GPUS["h100-sxm-80gb"], NDR_400),
    "a100": Hardware("a100", GPUS["a100-sxm-80gb"], FABRICS["roce-1600g-per-node"]),
    "h200-node": Hardware("h200-node", GPUS["h200"], None),
}
"""Every GPU of profiles.GPUS with NDR InfiniBand between nodes of 8; ``h100``/``a100`` the SXM 80 GB
parts (A100 clusters on llm-foundry's RoCE); ``h200-node`` one node of H200s, nothing beyond."""


def profile(name: str, devices: tuple[int, ...]) -> Hardware:
    """The profile called ``name``, checked against ``devices``; ConfigError (one line) otherwise."""
    if name not in PROFILES:
        raise ConfigError(f"unknown hardware {name!r}; profiles: {', '.join(PROFILES)}")
    hardware = PROFILES[name]
    beyond = [d for d in devices if d > hardware.node_size]
    if beyond and hardware.network is None:
        others = ", ".join(k for k, h in PROFILES.items() if h.network is not None)
        raise ConfigError(f"--devices {','.join(map(str, beyond))} is beyond one node of {hardware.node_size} and "
                          f"{name} has no network between nodes; use a profile with one ({others})")
    return hardware


@functools.cache
def _block_counts(family: str, preset: str, norm: str) -> list[tuple[float, int, int, bool, float]]:
    """Per block: forward FLOPs per sample (torch's flop counter, on the meta device), its kernels (leaf
    modules, each a launch or a few), its width (the narrowest Linear input, 0 without one), whether it
    convolves, and the elements its normalisations and activations write per sample."""
    with torch.device("meta"):
        spec = models.build_model(family, preset, norm)
    inputs, _ = spec.make_batch(COUNT_BATCH, torch.Generator().manual_seed(0))
    x, counts = inputs.to("meta"), []
    for block in spec.blocks:
        written: list[int] = []
        hooks = [m.register_forward_hook(lambda _m, _i, out, into=written: into.append(out.numel()))
                 for m in block.modules() if isinstance(m, ELEMENTWISE)]
        counter = FlopCounterMode(display=False)
        with counter:
            x = block(x)
        for hook in hooks:
            hook.remove()
        leaves = [m for m in block.modules() if not list(m.children())]
        widths = [m.in_features for m in leaves if isinstance(m, nn.Linear)]
        counts.append((counter.get_total_flops() / COUNT_BATCH, max(1, len(leaves)), min(widths, default=0),
                       any(isinstance(m, nn.Conv2d) for m in leaves), sum(written) / COUNT_BATCH))
    return counts


class RooflineSource:
    """A cost source (bench/predict/costs.py) for a model on a hardware profile: PREDICTED at achievable
    shares of the data sheet (the name stays for its callers; it is no longer a bare roofline)."""

    def __init__(self, hardware: Hardware, family: str, preset: str, norm: str, precision: str) -> None:
        if precision not in PRECISIONS:
            raise ConfigError(f"--precision {precision!r}; choose from {', '.join(PRECISIONS)}")
        self.hardware, self.precision = hardware, precision
        with torch.device("meta"):
            spec = models.build_model(family, preset, norm)
        gpu, shares = hardware.gpu, hardware.shares
        peak = gpu.peak_flops[precision]
        self.compute_bytes = 2 if precision == "bf16" else 4
        self.efficiencies: dict[str, float] = {"hbm": shares.hbm}
        hbm = gpu.hbm_bytes_per_s * shares.hbm
        self._blocks = []
        for (flops, kernels, width, convolves, elements), params, saved, output, tensors in zip(
                _block_counts(family, preset, norm), parameter_counts(spec.blocks), saved_bytes_per_sample(spec),
                output_bytes_per_sample(spec), tensor_counts(spec.blocks), strict=True):
            share = self._share(shares, width, convolves)
            # Activations counted in fp32 on the meta device; autocast keeps them in the compute precision.
            saved = saved * self.compute_bytes / 4
            # A third of the elementwise passes forward, two thirds backward (achievable.ELEMENTWISE_PASSES).
            elementwise = elements * self.compute_bytes * ELEMENTWISE_PASSES / 3
            forward = (flops / (peak * share) + elementwise / hbm) * 1e3
            weights = params * self.compute_bytes / hbm * 1e3  # read once per pass
            floor = kernels * LAUNCH_S * 1e3
            self._blocks.append(BlockCost(Line(max(weights, floor), forward), Line(max(2 * weights, 2 * floor),
                                                                                  2 * forward),
                                          params, output * self.compute_bytes / 4, saved, tensors))
        self._hbm = hbm

    def _share(self, shares: Shares, width: int, convolves: bool) -> float:
        if convolves:
            share = shares.convolution_tf32 if self.precision != "bf16" else shares.convolution
            self.efficiencies["convolution"] = share
        elif width:
            share = shares.matmul_at(width)
            self.efficiencies[f"matmul at width {width}"] = share
        else:
            share = shares.matmul  # no Linear: the few FLOPs (embeddings, pooling) at the large-GEMM share
        if self.precision == "fp32":  # no tensor cores: the data sheet's fp32 peak is what FMA units reach
            share = max(share, 0.8)
        return share

    def runtime_for(self, ranks: int, global_batch: float | None = None) -> RuntimeOverheads:
        """The runtimes' own costs (hooks, bucketing) are not on a data sheet: the launch floor stands for them."""
        return RuntimeOverheads()

    def residual_across_ranks(self, term: str, samples: float) -> float | None:
        return None

    def overlap_for(self, ranks: int) -> float:
        """NCCL runs on its own streams: a collective hides wholly behind compute that does not wait for it."""
        return 1.0

    def blocks(self, threads: int) -> list[BlockCost]:
        return self._blocks

    def optimizer_ms(self, threads: int, parameters: float) -> float:
        # SGD with momentum reads parameter, gradient and state and writes two: 5 x 4 bytes per parameter.
        return parameters * 20 / self._hbm * 1e3

    def overhead_ms(self, threads: int, samples: float) -> float:
        return 0.0

    def copy_ms(self, threads: int, size: float) -> float:
        return 2 * size / self._hbm * 1e3  # read and write

    def slowdown_for(self, processes: float) -> float:
        return 1.0

    def action_slowdown(self, processes: float) -> float:
        return 1.0

    def collective_ms(self, operation: str, size: float, ranks: int, stride: int = 1) -> float:
        """``size`` as costs.py names it: all_gather each rank's shard (of fp32 parameters, gathered in the
        compute precision), the others the whole tensor each rank contributes. A group whose ranks are
        ``stride`` apart has ``node_size // stride`` of them in a node (one, once the stride fills a node)."""
        if ranks <= 1 or size <= 0:
            return 0.0
        hw = self.hardware
        if operation == "send_recv":
            return self.transfer_ms(size, 0, stride)
        whole = size * ranks * self.compute_bytes / 4 if operation == "all_gather" else size
        per_node = max(1, hw.node_size // max(1, stride))
        return collective_seconds(operation, whole, ranks, per_node, hw.gpu.nvlink, hw.network) * 1e3

    def transfer_ms(self, size: float, sender: int, receiver: int, processes: int = 2) -> float:
        hw = self.hardware
        return p2p_seconds(size, sender, receiver, hw.node_size, hw.gpu.nvlink, hw.network) * 1e3
