"""The sweep's plan: the grid of configurations, each validated as ``bench run`` would, once per repeat."""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from typing import Any

from bench.harness.config import RunConfig, resolve, unread_groups_reset
from bench.harness.labels import run_label
from strategies import REFERENCE, STRATEGIES, ConfigError, Strategy
from strategies.options import FSDPOptions, PipelineOptions, SplitOptions
from strategies.schedules import BY_NAME as SCHEDULES_BY_NAME


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep; every tuple is one axis of the grid."""

    strategies: tuple[str, ...]
    """Strategies to run (default: all registered)."""
    models: tuple[str, ...]
    """Model families."""
    devices: tuple[int, ...]
    """Device counts."""
    base: RunConfig
    """Every other setting: preset, steps, warm-up, output file, ... (``batch_size`` per ``scaling``)."""
    scaling: str = "strong"
    """weak: --batch-size is per device and grows with the device count; strong: it is the global batch."""
    microbatches: tuple[int, ...] = (1, 4)
    """Micro-batch counts, for strategies that take them."""
    schedules: tuple[str, ...] = ("gpipe",)
    """Pipeline schedules, for strategies that take them."""
    reshard_after_forward: tuple[bool, ...] = (True, False)
    """FSDP's modes: True is ZeRO-3, False ZeRO-2."""
    run_timeout_s: float = 600.0
    """Wall-clock limit of one configuration, start-up included."""
    repeats: int = 1
    """Runs of every configuration, each in a fresh process, interleaved round by round."""
    rerun_disturbed: bool = True
    """Whether a run that other work on the machine disturbed gets one more try once all rounds are done."""


@dataclass(frozen=True)
class PlannedRun:
    """One point of the grid: a configuration to run, or the reason it is skipped."""

    config: RunConfig
    skip_reason: str | None = None

    @property
    def label(self) -> str:
        return run_label(self.config.as_dict())


def run_key(config: dict[str, Any]) -> str:
    """What identifies a configuration across runs of a sweep: the whole config but the output file."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k != "out"})


def plan(sweep: SweepConfig) -> list[PlannedRun]:
    """The grid, each point validated exactly as ``bench run`` would validate it, once per repeat.

    Round by round: every configuration runs once before any runs again, so that a machine's drift
    over the sweep reaches every configuration alike, and ``single`` at each global batch (the
    baseline of every speed-up at that batch) is measured in every round."""
    grid = []
    for strategy, model in itertools.product(sweep.strategies, sweep.models):
        cls = STRATEGIES[strategy]
        fits = [d for d in sweep.devices if d >= cls.min_devices and (cls.max_devices is None or d <= cls.max_devices)]
        if not fits and strategy != REFERENCE:  # the reference comes back below, as every other run's baseline
            grid.append(_no_device_count(sweep, cls, model))
        for devices in fits:
            for values in itertools.product(*_axes(sweep, cls)):
                point: dict[str, Any] = {flag: value for flags in values for flag, value in flags.items()}
                config = sweep.base.with_flags(strategy=strategy, model=model, devices=devices, scaling=sweep.scaling,
                    batch_size=_global_batch(sweep, model, devices), **point,
                )
                grid.append(_checked(unread_groups_reset(config), cls.needs_gpus))
    grid += _baselines(sweep, grid)
    return [dataclasses.replace(run, config=run.config.with_flags(repeat=r))
            for r in range(sweep.repeats) for run in grid if r == 0 or run.skip_reason is None]


def _no_device_count(sweep: SweepConfig, cls: type[Strategy], model: str) -> PlannedRun:
    """The row that says why a strategy has no point in this sweep: no device count in it is one it runs on."""
    config = sweep.base.with_flags(strategy=cls.name, model=model, devices=cls.min_devices,
                                   scaling=sweep.scaling, batch_size=_global_batch(sweep, model, cls.min_devices))
    counts = ", ".join(map(str, sweep.devices))
    if cls.max_devices is not None and min(sweep.devices) > cls.max_devices:
        reason = f"{cls.name} runs on at most {cls.max_devices} device(s); this sweep's device counts are {counts}"
    else:
        reason = f"{cls.name} needs at least {cls.min_devices} devices; this sweep's device counts are {counts}"
    return PlannedRun(unread_groups_reset(config), skip_reason=reason)


def _baselines(sweep: SweepConfig, grid: list[PlannedRun]) -> list[PlannedRun]:
    """``single`` at every other global batch of the grid (weak scaling grows it with the devices), so that
    every speed-up is against one device doing the same work."""
    if REFERENCE not in sweep.strategies:
        return []
    have = {(r.config.workload.model, r.config.run.batch_size) for r in grid
            if r.config.strategy == REFERENCE and r.skip_reason is None}
    wanted = sorted({(r.config.workload.model, r.config.run.batch_size) for r in grid if r.skip_reason is None} - have)
    return [_checked(unread_groups_reset(sweep.base.with_flags(strategy=REFERENCE, model=model, devices=1,
                                                               scaling=sweep.scaling, batch_size=batch)),
                     needs_gpus=False)
            for model, batch in wanted]


def _axes(sweep: SweepConfig, cls: type[Strategy]) -> list[tuple[dict[str, object], ...]]:
    """The sweep's axes that ``cls`` reads, each a tuple of the flags of its points: micro-batches for
    strategies that split, schedules for pipelines, ZeRO-3 and ZeRO-2 for fsdp."""
    axes: list[tuple[dict[str, object], ...]] = []
    if SplitOptions in cls.reads:
        axes.append(tuple({"microbatches": m} for m in sweep.microbatches))
    if PipelineOptions in cls.reads:
        axes.append(tuple(_schedule_point(sweep, name) for name in sweep.schedules))
    if FSDPOptions in cls.reads:
        axes.append(tuple({"reshard_after_forward": r} for r in sweep.reshard_after_forward))
    return axes


def _schedule_point(sweep: SweepConfig, name: str) -> dict[str, object]:
    """A schedule's flags: an interleaved schedule (two stages per rank or more) gets its fewest stages per rank
    unless the sweep sets them, so that one sweep compares gpipe, 1f1b and interleaved-1f1b."""
    pipeline = sweep.base.group(PipelineOptions)
    info = SCHEDULES_BY_NAME.get(name)
    if info is None or pipeline.stages_per_rank != PipelineOptions.stages_per_rank:  # unknown (refused later), or set
        return {"schedule": name}
    return {"schedule": name, "stages_per_rank": max(pipeline.stages_per_rank, info.min_v)}


def _global_batch(sweep: SweepConfig, model: str, devices: int) -> int:
    per_step = sweep.base.run.batch_size or resolve(unread_groups_reset(sweep.base.with_flags(model=model))
                                                    ).run.global_batch
    return per_step * devices if sweep.scaling == "weak" else per_step


def _checked(config: RunConfig, needs_gpus: bool) -> PlannedRun:
    try:
        resolved = resolve(config)
    except ConfigError as exc:
        return PlannedRun(config, skip_reason=str(exc))
    if needs_gpus and resolved.run.accelerator == "cpu":
        return PlannedRun(
            resolved, f"{config.strategy} needs GPUs: on the CPU it runs one device whatever --devices says"
        )
    return PlannedRun(resolved)
