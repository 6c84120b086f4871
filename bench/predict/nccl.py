"""Collectives as NCCL runs them on a cluster of nodes: the bytes each GPU moves over NVLink and over the network.

Sizes are the whole tensor ``S`` (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter:
the input before it is scattered), on ``N`` ranks in ``k`` nodes of ``g`` GPUs (one NIC per GPU):

    p = 2 for all_reduce (reduce-scatter then all-gather), 1 for all_gather and reduce_scatter
    inside one node (k = 1), ring:        NVLink per GPU                 network per GPU
                                          p (N-1)/N x S                  0
    across nodes (k > 1), NCCL's rings:   p (N-1)/N x S x (g-1)/g        p (N-1)/N x S / g

Each ring edge carries p (N-1)/N of the tensor. NCCL builds one ring per channel, each leaving a node
through a different NIC (one NIC per GPU here), so of a GPU's g edges over the channels g-1 are NVLink and
one is its NIC: the NIC carries 1/g of the ring's bytes. Its tree all-reduce moves the same bytes over the
network (each node sends S up and S down the two binary trees, S/g per NIC each way; Sanders et al. 2009;
NCCL's docs), so one formula serves both. NCCL pipelines the levels in chunks, so an operation lasts as
long as its slower level, plus a latency per step of its algorithm.

A point-to-point transfer (a pipeline's neighbours) crosses one link: NVLink when both ranks share a
node, the sender's NIC otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@dataclass(frozen=True)
class Link:
    """One GPU's share of a fabric: bytes/s it moves at large messages, how that falls for small ones."""

    name: str
    bytes_per_s: float
    """Bus bandwidth at large messages (nccl-tests' busbw: per GPU, what its busiest link carries)."""
    half_bytes: float
    """The message at which the bandwidth is half of ``bytes_per_s``: bw(m) = bytes_per_s x m / (m + half)."""
    latency_s: float
    """Per step of the algorithm (a ring's hop, a tree's level)."""
    source: str

    def bandwidth(self, message: float) -> float:
        """Bytes/s at a message of ``message`` bytes."""
        return self.bytes_per_s * message / (message + self.half_bytes)


@dataclass(frozen=True)
class Traffic:
    """Bytes one GPU sends over each level for one operation (the largest over the GPUs)."""

    nvlink_bytes: float
    network_bytes: float


def layout(ranks: int, node_size: int) -> tuple[int, int]:
    """(GPUs per node g, nodes k) of ``ranks`` packed into nodes of ``node_size``."""
    g = min(ranks, node_size)
    return g, math.ceil(ranks / g)


def traffic(operation: str, size: float, ranks: int, node_size: int) -> Traffic:
    """The bytes per GPU of ``operation`` on a ``size``-byte tensor (see the module's table)."""
    if operation not in COLLECTIVES:
        raise ValueError(f"unknown collective {operation!r}; choose from {', '.join(COLLECTIVES)}")
    if ranks <= 1 or size <= 0:
        return Traffic(0.0, 0.0)
    g, k = layout(ranks, node_size)
    # A broadcast is a pipelined chain: every edge carries the whole tensor once.
    passes = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}.get(operation)
    edge = size if passes is None else passes * (ranks - 1) / ranks * size
    if k == 1:
        return Traffic(edge, 0.0)
    return Traffic(edge * (g - 1) / g, edge / g)


def collective_seconds(operation: str, size: float, ranks: int, node_size: int, nvlink: Link,
                       network: Link | None) -> float:
    """Seconds of ``operation``: the slower level's bytes over its bandwidth at the chunk it sends, plus
    the algorithm's latency (a ring's 2(g-1) hops inside the node; a tree's 2 log2(k) levels across)."""
    moved = traffic(operation, size, ranks, node_size)
    if moved.nvlink_bytes == 0 and moved.network_bytes == 0:
        return 0.0
    g, k = layout(ranks, node_size)
    inside = moved.nvlink_bytes / nvlink.bandwidth(size / g) + 2 * (g - 1) * nvlink.latency_s if g > 1 else 0.0
    across = 0.0
    if k > 1:
        if network is None:
            raise ValueError(f"{ranks} ranks span {k} nodes of {node_size} and the profile has no network")
        across = moved.network_bytes / network.bandwidth(size / g) + 2 * math.log2(k) * network.latency_s
    return max(inside, across)


def p2p_seconds(size: float, sender: int, receiver: int, node_size: int, nvlink: Link,
                network: Link | None) -> float:
    """One transfer of ``size`` bytes between two global ranks: over NVLink inside a node, else the NIC."""
    if size <= 0 or sender == receiver:
        return 0.0
    link = nvlink if sender // node_size == receiver // node_size else network
    if link is None:
        raise ValueError(f"ranks {sender} and {receiver} are on different nodes and the profile has no network")
    return link.latency_s + size / link.bandwidth(size)


def bus_bandwidth(operation: str, size: float, ranks: int, node_size: int, nvlink: Link,
                  network: Link | None) -> float:
    """What nccl-tests would print as busbw for this prediction: algbw x 2(N-1)/N (all-reduce) or (N-1)/N."""
    seconds = collective_seconds(operation, size, ranks, node_size, nvlink, network)
    factor = 2 * (ranks - 1) / ranks if operation == "all_reduce" else (ranks - 1) / ranks
    return size / seconds * factor
