"""Hardware the run cannot see: data-sheet profiles, and a cost source built from one (a roofline).

Compute: each block's forward at max(FLOPs / peak, bytes / HBM bandwidth) per sample, its backward
twice its forward's FLOPs (the input and weight gradients), the update memory-bound. That is an
upper bound on speed (no kernel reaches its peak), and every prediction from it says "roofline".

Communication, as NCCL's tests report it: an operation on N ranks takes its algorithm's share of the
bytes over the bus bandwidth at that message size (all-reduce 2(N-1)/N, all-gather and reduce-scatter
(N-1)/N), plus a latency. Inside a node of 8 the NVLink curve applies; beyond, the operation is
hierarchical (reduce-scatter inside the node, all-reduce of the shard across nodes over InfiniBand,
all-gather inside the node), and a pipeline's neighbours across nodes talk over InfiniBand.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

import models
from bench.predict.calibration import BlockCost, Line, RuntimeOverheads
from models.sizes import COUNT_BATCH, output_bytes_per_sample, parameter_counts, saved_bytes_per_sample, tensor_counts
from strategies import ConfigError

GB = 1e9


@dataclass(frozen=True)
class BandwidthCurve:
    """Bus bandwidth (bytes/s) by message size (bytes), interpolated in log size, and a fixed latency."""

    points: tuple[tuple[float, float], ...]
    latency_s: float

    def bus_bandwidth(self, size: float) -> float:
        sizes = [s for s, _ in self.points]
        if size <= sizes[0]:
            return self.points[0][1] * size / sizes[0]  # latency-bound: bandwidth falls with size
        if size >= sizes[-1]:
            return self.points[-1][1]
        for (s0, b0), (s1, b1) in zip(self.points, self.points[1:], strict=False):
            if s0 <= size <= s1:
                t = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
                return b0 + t * (b1 - b0)
        return self.points[-1][1]


@dataclass(frozen=True)
class Hardware:
    """One GPU model in nodes of ``node_size``, from its data sheet."""

    name: str
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float
    memory_bytes: float
    nvlink: BandwidthCurve
    network: BandwidthCurve | None
    """Across nodes (None: a single node, nothing beyond ``node_size``)."""
    node_size: int = 8
    source: str = ""


# 8 x H200 NCCL all-reduce bus bandwidth, as the issue quotes it: ~53 GB/s at 1 MB, ~240 at 16 MB,
# ~480 at 8 GB. InfiniBand NDR 400 Gb/s per GPU: 50 GB/s at most; its curve is an assumption.
NVLINK_8 = BandwidthCurve(((1e6, 53 * GB), (16e6, 240 * GB), (8e9, 480 * GB)), 10e-6)
INFINIBAND_NDR = BandwidthCurve(((1e6, 5 * GB), (16e6, 25 * GB), (1e9, 45 * GB)), 20e-6)
PROFILES = {
    "h200": Hardware("H200 SXM", {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12}, 4.8e12, 141e9, NVLINK_8,
                     INFINIBAND_NDR, source="NVIDIA H200 SXM data sheet (dense), NDR InfiniBand per GPU"),
    "h100": Hardware("H100 SXM", {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12}, 3.35e12, 80e9, NVLINK_8,
                     INFINIBAND_NDR, source="NVIDIA H100 SXM data sheet (dense), NDR InfiniBand per GPU"),
    "h200-node": Hardware("H200 SXM, one node", {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12}, 4.8e12,
                          141e9, NVLINK_8, None, source="NVIDIA H200 SXM data sheet (dense), no network"),
}


def profile(name: str, devices: tuple[int, ...]) -> Hardware:
    """The profile called ``name``, checked against ``devices``; ConfigError (one line) otherwise."""
    if name not in PROFILES:
        raise ConfigError(f"unknown hardware {name!r}; profiles: {', '.join(PROFILES)}")
    hardware = PROFILES[name]
    beyond = [d for d in devices if d > hardware.node_size]
    if beyond and hardware.network is None:
        raise ConfigError(f"--devices {','.join(map(str, beyond))} is beyond one node of {hardware.node_size} and "
                          f"{name} has no network between nodes; use a profile with one ({', '.join(PROFILES)})")
    return hardware


@functools.cache
def _block_flops(family: str, preset: str, norm: str) -> list[float]:
    """Per block, forward FLOPs per sample (torch's flop counter, on the meta device)."""
    with torch.device("meta"):
        spec = models.build_model(family, preset, norm)
    inputs, _ = spec.make_batch(COUNT_BATCH, torch.Generator().manual_seed(0))
    x, flops = inputs.to("meta"), []
    for block in spec.blocks:
        counter = FlopCounterMode(display=False)
        with counter:
            x = block(x)
        flops.append(counter.get_total_flops() / COUNT_BATCH)
    return flops


class RooflineSource:
    """A cost source (bench/predict/costs.py) for a model on a hardware profile: PREDICTED from the data sheet."""

    def __init__(self, hardware: Hardware, family: str, preset: str, norm: str, precision: str) -> None:
        self.hardware, self.precision = hardware, precision
        with torch.device("meta"):
            spec = models.build_model(family, preset, norm)
        peak = hardware.peak_flops[precision]
        compute_bytes = 2 if precision == "bf16" else 4
        self._blocks = []
        for flops, params, saved, output, tensors in zip(
                _block_flops(family, preset, norm), parameter_counts(spec.blocks), saved_bytes_per_sample(spec),
                output_bytes_per_sample(spec), tensor_counts(spec.blocks), strict=True):
            # Weights read once per pass; activations written forward and read backward.
            forward = max(flops / peak, saved / hardware.hbm_bytes_per_s) * 1e3
            weights = params * compute_bytes / hardware.hbm_bytes_per_s * 1e3
            self._blocks.append(BlockCost(Line(weights, forward), Line(2 * weights, 2 * forward), params,
                                          output, saved, tensors))

    def runtime_for(self, ranks: int) -> RuntimeOverheads:
        """The runtimes' own costs are not on a data sheet: none are assumed."""
        return RuntimeOverheads()

    def overlap_for(self, ranks: int) -> float:
        """NCCL runs on its own streams: a collective hides wholly behind compute that does not wait for it."""
        return 1.0

    def blocks(self, threads: int) -> list[BlockCost]:
        return self._blocks

    def optimizer_ms(self, threads: int, parameters: float) -> float:
        # SGD with momentum reads parameter, gradient and state and writes two: 5 x 4 bytes per parameter.
        return parameters * 20 / self.hardware.hbm_bytes_per_s * 1e3

    def overhead_ms(self, threads: int, samples: float) -> float:
        return 0.0

    def copy_ms(self, threads: int, size: float) -> float:
        return 2 * size / self.hardware.hbm_bytes_per_s * 1e3  # read and write

    def slowdown_for(self, processes: int) -> float:
        return 1.0

    def collective_ms(self, operation: str, size: float, ranks: int) -> float:
        if ranks <= 1 or size <= 0:
            return 0.0
        hw = self.hardware
        if operation == "send_recv":  # a pipeline's neighbours: NVLink inside a node, else the network
            curve = hw.nvlink if ranks <= hw.node_size or hw.network is None else hw.network
            return (curve.latency_s + size / curve.bus_bandwidth(size)) * 1e3
        if ranks <= hw.node_size or hw.network is None:
            return _ring(operation, size, ranks, hw.nvlink)
        nodes = math.ceil(ranks / hw.node_size)
        inside = _ring("reduce_scatter", size, hw.node_size, hw.nvlink) + _ring("all_gather", size, hw.node_size,
                                                                                  hw.nvlink)
        across = _ring(operation, size / hw.node_size, nodes, hw.network)
        return (inside if operation in ("all_reduce",) else inside / 2) + across


def _ring(operation: str, size: float, ranks: int, curve: BandwidthCurve) -> float:
    share = 2 * (ranks - 1) / ranks if operation == "all_reduce" else (ranks - 1) / ranks
    whole = size * ranks if operation == "all_gather" else size  # all_gather's size is each rank's shard
    return (curve.latency_s * (ranks - 1) + whole * share / curve.bus_bandwidth(whole)) * 1e3
