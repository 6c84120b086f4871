"""``python -m bench sweep``: strategies x models x device counts, each in its own process.

The sweep is a loop over ``bench run`` child processes. Each child appends its own record;
a child that fails, runs out of memory or outlives its timeout becomes a row saying so, and
the sweep goes on. Rows are appended atomically, so an interrupted sweep loses nothing, and
a configuration that already has a row is skipped on the next run (``--force`` redoes it).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

import models
from bench import launch
from bench.cli_args import add_config_arguments, comma_list, config_from_args, config_to_argv, fail
from bench.config import SCALINGS, RunConfig, default_device_counts, resolve, to_json, unread_groups_reset
from bench.environment import environment
from bench.labels import run_label
from bench.launch import ChildOutcome, child_command
from bench.records import RecordError, append_record, failure_record, read_records
from strategies import STRATEGIES, ConfigError, Launch, Strategy, strategy_class
from strategies.options import PipelineOptions, SplitOptions

log = logging.getLogger(__name__)


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
    scaling: str = "weak"
    """weak: --batch-size is per device and grows with the device count; strong: it is the global batch."""
    microbatches: tuple[int, ...] = (1, 4)
    """Micro-batch counts, for strategies that take them."""
    schedules: tuple[str, ...] = ("gpipe",)
    """Pipeline schedules, for strategies that take them."""
    run_timeout_s: float = 600.0
    """Wall-clock limit of one configuration, start-up included."""


@dataclass(frozen=True)
class PlannedRun:
    """One point of the grid: a configuration to run, or the reason it is skipped."""

    config: RunConfig
    skip_reason: str | None = None

    @property
    def label(self) -> str:
        return run_label(self.config.as_dict())


def run_key(config: dict[str, object]) -> str:
    """What identifies a configuration across runs of a sweep: the whole config but the output file."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k != "out"})


def plan(sweep: SweepConfig) -> list[PlannedRun]:
    """The grid, with each point validated exactly as ``bench run`` would validate it."""
    runs = []
    for strategy, model, devices in itertools.product(sweep.strategies, sweep.models, sweep.devices):
        cls = STRATEGIES[strategy]
        if devices < cls.min_devices or (cls.max_devices is not None and devices > cls.max_devices):
            continue  # not a configuration at all (single on 2 devices), so not a skipped one either
        axes = _axes(sweep, cls)
        for values in itertools.product(*axes.values()):
            config = dataclasses.replace(
                sweep.base, strategy=strategy, model=model, devices=devices, scaling=sweep.scaling,
                batch_size=_global_batch(sweep, model, devices), **dict(zip(axes, values, strict=True)),
            )
            runs.append(_checked(unread_groups_reset(config), cls.needs_gpus))
    return runs


def _axes(sweep: SweepConfig, cls: type[Strategy]) -> dict[str, tuple[object, ...]]:
    """The sweep's axes that ``cls`` reads: micro-batches for strategies that split, schedules for pipelines."""
    axes: dict[str, tuple[object, ...]] = {}
    if SplitOptions in cls.reads:
        axes["microbatches"] = sweep.microbatches
    if PipelineOptions in cls.reads:
        axes["schedule"] = sweep.schedules
    return axes


def _global_batch(sweep: SweepConfig, model: str, devices: int) -> int:
    per_step = sweep.base.batch_size or resolve(dataclasses.replace(sweep.base, model=model)).batch_size
    return per_step * devices if sweep.scaling == "weak" else per_step


def _checked(config: RunConfig, needs_gpus: bool) -> PlannedRun:
    try:
        resolved = resolve(config)
    except ConfigError as exc:
        return PlannedRun(config, skip_reason=str(exc))
    if needs_gpus and resolved.accelerator == "cpu":
        return PlannedRun(
            resolved, f"{config.strategy} needs GPUs: on the CPU it runs one device whatever --devices says"
        )
    return PlannedRun(resolved)


def completed_keys(out: Path) -> set[str]:
    """Keys of the configurations that already have a row in ``out`` (torn lines do not count)."""
    if not out.exists():
        return set()
    records, bad = read_records(out)
    for line in bad:
        log.warning("%s:%d skipped: %s", out, line.line_number, line.reason)
    return {run_key(r["config"]) for r in records if isinstance(r.get("config"), dict)}


def execute(sweep: SweepConfig, runs: list[PlannedRun], force: bool = False) -> dict[str, int]:
    """Runs every planned configuration that has no row yet; returns a count per outcome."""
    out = Path(sweep.base.out)
    done = set() if force else completed_keys(out)
    todo = [r for r in runs if r.skip_reason is None and run_key(r.config.as_dict()) not in done]
    counts = {"ok": 0, "failed": 0, "oom": 0, "timeout": 0, "already done": 0, "skipped": 0}
    counts["skipped"] = sum(r.skip_reason is not None for r in runs)
    counts["already done"] = sum(r.skip_reason is None for r in runs) - len(todo)
    for run in runs:
        # Skipped points get a row too, so that the report lists them with the reason.
        if run.skip_reason is not None and (force or run_key(run.config.as_dict()) not in done):
            append_record(out, failure_record(run.config, "skipped", run.skip_reason, environment()))
    bar = tqdm(todo, desc="sweep", unit="config", file=sys.stderr, dynamic_ncols=True)
    for run in bar:
        bar.set_postfix_str(run.label)
        key = run_key(run.config.as_dict())
        rows_before = _rows_for(out, key)
        ended = run_child(run.config, sweep.run_timeout_s, child_log(out, run.label))
        counts[ended.status] += 1
        if ended.status != "ok":
            log.warning("%s: %s: %s", run.label, ended.status, ended.reason)
            # A child that ran out of memory wrote its own row, with its memory figures.
            if _rows_for(out, key) == rows_before:
                row = failure_record(run.config, ended.status, ended.reason, environment(), duration_s=ended.seconds)
                append_record(out, row)
    return counts


def _rows_for(out: Path, key: str) -> int:
    if not out.exists():
        return 0
    return sum(run_key(r["config"]) == key for r in read_records(out)[0] if isinstance(r.get("config"), dict))


def run_child(config: RunConfig, timeout_s: float, log_path: Path | None = None) -> ChildOutcome:
    """``bench run`` for one configuration in a fresh process (torchrun where it needs one)."""
    per_device = STRATEGIES[config.strategy].launch is Launch.PER_DEVICE
    # torchrun's workers take the configuration as the sweep resolved it; a `bench run` child
    # (one process) validates its own command line, once.
    command, env = child_command(["run", *config_to_argv(config)], per_device, config.devices, config.accelerator,
                                 config.max_restarts, to_json(config))
    return launch.run_child(command, env, timeout_s, log_path)


def child_log(out: Path, label: str) -> Path:
    """Where a sweep keeps a child's whole output: beside its results, named by its label."""
    name = re.sub(r"[^A-Za-z0-9._=-]+", "_", label).strip("_")
    return out.parent / f"{out.stem}.logs" / f"{name}.log"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("sweep", help="run strategies x models x device counts, one process each")
    parser.add_argument("--strategies", type=comma_list(str), default=tuple(STRATEGIES), help="default: all")
    parser.add_argument("--models", type=comma_list(str), default=tuple(models.FAMILIES), help="default: all")
    parser.add_argument(
        "--devices",
        type=comma_list(int),
        default=None,
        help="device counts, e.g. 1,2,4 "
        "(default: powers of two up to the GPUs present; on CPU up to the cores, at most 4)",
    )
    parser.add_argument(
        "--scaling",
        choices=SCALINGS,
        default="weak",
        help="weak: --batch-size per device; strong: --batch-size is the global batch (default: weak)",
    )
    parser.add_argument("--microbatches", type=comma_list(int), default=(1, 4), help="for mp and pp (default: 1,4)")
    parser.add_argument("--schedules", type=comma_list(str), default=("gpipe",), help="for pipelines (default: gpipe)")
    parser.add_argument("--run-timeout-s", type=float, default=600.0, help="limit per configuration (default: 600)")
    parser.add_argument("--force", action="store_true", help="redo configurations that already have a row")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the skip reasons, run nothing")
    # Fewer steps than a single run: a sweep's cost is mostly process start-up, and 6 timed steps
    # after 2 warm-up ones already give a stable median on every preset.
    add_config_arguments(parser, RunConfig, skip=SWEPT_FIELDS,
                         defaults={"out": "results/sweep.jsonl", "steps": 6, "warmup": 2})


# Fields that the sweep sets per point rather than taking from the command line.
SWEPT_FIELDS = ("strategy", "model", "devices", "microbatches", "schedule", "scaling")


def main(args: argparse.Namespace) -> int:
    base = config_from_args(RunConfig, args, skip=SWEPT_FIELDS)
    try:
        # The strategies' own options are checked point by point; the rest once, here.
        neutral = unread_groups_reset(base)
        resolved_base = resolve(neutral)
        for name, values in (("--devices", args.devices), ("--microbatches", args.microbatches)):
            if values is not None and (not values or min(values) < 1):
                raise ConfigError(f"{name} must list numbers of at least 1, got {values}")
        if args.run_timeout_s <= 0:
            raise ConfigError(f"--run-timeout-s must be positive, got {args.run_timeout_s}")
        sweep = SweepConfig(
            strategies=args.strategies, models=args.models,
            devices=args.devices or default_device_counts(resolved_base.accelerator),
            base=dataclasses.replace(base, accelerator=resolved_base.accelerator),
            scaling=args.scaling, microbatches=args.microbatches, schedules=args.schedules,
            run_timeout_s=args.run_timeout_s,
        )
        for name in sweep.strategies:
            strategy_class(name)
        for name in sweep.models:
            resolve(dataclasses.replace(neutral, model=name))
        runs = plan(sweep)
        done = set() if args.force else completed_keys(Path(base.out))
    except (ConfigError, RecordError) as exc:
        fail("bench sweep", str(exc))
    if args.dry_run:
        for run in runs:
            state = (
                "skip: " + run.skip_reason
                if run.skip_reason
                else ("done" if run_key(run.config.as_dict()) in done else "run")
            )
            print(f"{run.label:<40} {state}")
        return 0
    try:
        counts = execute(sweep, runs, force=args.force)
    except KeyboardInterrupt:
        print(
            f"bench sweep: interrupted; completed rows are kept in {base.out}: run the same command to resume",
            file=sys.stderr,
        )
        return 130
    print("sweep: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f"  -> {base.out}")
    return 0


__all__ = ["PlannedRun", "SweepConfig", "add_parser", "completed_keys", "execute", "main", "plan", "run_key"]
