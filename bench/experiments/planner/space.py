"""The configurations ``bench plan`` weighs: every registered strategy, and for each the axes of the option
groups it reads (a mesh's degrees, micro-batches, schedules, stages per rank, FSDP's resharding).

Nothing here knows a strategy by name: a strategy that reads ``MeshOptions`` gets every factorisation of the
devices into the mesh's degrees, one that reads ``SplitOptions`` the micro-batch counts, and so on. Only
combinations that mean something are generated (a schedule where there is a pipeline, more stages per rank
where the schedule takes them); every other rule is the runner's own, applied by ``resolve`` in search.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.harness.config import RunConfig
from strategies import STRATEGIES
from strategies.mesh import DIMS, DP_SHARD, PP, TP
from strategies.options import FSDPOptions, MeshOptions, PipelineOptions, SplitOptions
from strategies.schedules import BY_NAME

OPTIONAL_DIMS = (DP_SHARD, TP)
"""Mesh degrees whose flags default to 1 (strategies/mesh.py): a candidate leaves them unset there."""


@dataclass(frozen=True)
class SearchSpace:
    """What to search: one model on one device count, at one global batch."""

    model: str
    preset: str
    devices: int
    global_batch: int
    strategies: tuple[str, ...]
    """Registered strategies to weigh (default: all)."""
    schedules: tuple[str, ...]
    """Pipeline schedules to weigh (default: those this torch offers)."""
    microbatches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    """Micro-batch counts, for strategies that split the batch."""
    stages_per_rank: tuple[int, ...] = (1, 2)
    """Stages per rank, for schedules that take several."""
    norm: str = "batch"
    precision: str = "auto"
    """The precision the plan is for (a hardware profile's), carried into each candidate's command."""


def factorisations(devices: int, parts: int) -> list[tuple[int, ...]]:
    """Every ordered tuple of ``parts`` positive integers whose product is ``devices``."""
    if parts == 1:
        return [(devices,)]
    return [(d, *rest) for d in range(1, devices + 1) if devices % d == 0
            for rest in factorisations(devices // d, parts - 1)]


def _mesh_axis(devices: int) -> list[dict[str, int | None]]:
    """Every mesh of ``devices``; a sharding degree of 1 is left unset (None), as a user would leave its flag."""
    meshes: list[dict[str, int | None]] = []
    for degrees in factorisations(devices, len(DIMS)):
        mesh: dict[str, int | None] = dict(zip(DIMS, degrees, strict=True))
        meshes.append({dim: None if degree == 1 and dim in OPTIONAL_DIMS else degree for dim, degree in mesh.items()})
    return meshes


def _pipeline_axes(space: SearchSpace, pipelined: bool, reads_schedule: bool) -> list[dict[str, Any]]:
    """Micro-batches, schedule and stages per rank, only where a pipeline makes them mean something."""
    if not pipelined:
        return [{"microbatches": 1}]
    if not reads_schedule:  # mp: micro-batches only
        return [{"microbatches": m} for m in space.microbatches]
    axes = []
    for name, m, v in itertools.product(space.schedules, space.microbatches, space.stages_per_rank):
        info = BY_NAME[name]
        if v < info.min_v or (info.max_v is not None and v > info.max_v):
            continue
        axes.append({"microbatches": m, "schedule": name, "stages_per_rank": v})
    return axes


def candidates(space: SearchSpace, base: RunConfig) -> Iterator[RunConfig]:
    """Every configuration of the space, unvalidated: ``base`` with the strategy, devices and axes filled in."""
    for name in space.strategies:
        cls = STRATEGIES[name]
        if cls.max_devices is not None and space.devices > cls.max_devices:
            continue
        meshes: list[dict[str, int | None]] = [{}]
        if MeshOptions in cls.reads:
            meshes = [m for m in _mesh_axis(space.devices)
                      if sum(1 for degree in m.values() if (degree or 1) > 1) >= cls.min_mesh_dims]
        reshards = [{"reshard_after_forward": r} for r in (True, False)] if FSDPOptions in cls.reads else [{}]
        for mesh in meshes:
            pipelined = SplitOptions in cls.reads and (mesh.get(PP) or space.devices) > 1
            changes: dict[str, Any]
            split_axes = _pipeline_axes(space, pipelined, PipelineOptions in cls.reads)
            for split, reshard in itertools.product(split_axes, reshards):
                changes = {**mesh, **split, **reshard}
                yield base.with_flags(strategy=name, model=space.model, preset=space.preset,
                                      devices=space.devices, batch_size=space.global_batch, norm=space.norm,
                                      precision=space.precision, **changes)
