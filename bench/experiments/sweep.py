"""``python -m bench sweep``: strategies x models x device counts, each in its own process.

The sweep is a loop over ``bench run`` child processes. Each child appends its own record;
a child that fails, runs out of memory or outlives its timeout becomes a row saying so, and
the sweep goes on. Rows are appended atomically, so an interrupted sweep loses nothing, and
a configuration that already has a row is skipped on the next run (``--force`` redoes it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tqdm import tqdm

import models
from bench.experiments.grid import PlannedRun, SweepConfig, plan, run_key
from bench.harness import launch
from bench.harness.cli_args import add_config_arguments, comma_list, config_from_args, config_to_argv, fail
from bench.harness.config import SCALINGS, RunConfig, default_device_counts, resolve, unread_groups_reset
from bench.harness.environment import environment
from bench.harness.labels import file_name
from bench.harness.launch import ChildOutcome
from bench.harness.records import RecordError, append_record, failure_record, read_records
from bench.predict.for_sweep import SweepPredictor, check_calibration_choice, sweep_predictor
from strategies import STRATEGIES, ConfigError, strategy_class

log = logging.getLogger(__name__)


def completed_keys(out: Path) -> set[str]:
    """Keys of the configurations that already have a row in ``out`` (torn lines do not count)."""
    if not out.exists():
        return set()
    records, bad = read_records(out)
    for line in bad:
        log.warning("%s:%d skipped: %s", out, line.line_number, line.reason)
    return {run_key(r["config"]) for r in records if isinstance(r.get("config"), dict)}


def execute(
    sweep: SweepConfig, runs: list[PlannedRun], force: bool = False, predictor: SweepPredictor | None = None
) -> dict[str, int]:
    """Runs every planned configuration that has no row yet, each with its prediction where ``predictor``
    makes one; returns a count per outcome."""
    predictor = predictor or SweepPredictor()
    out = Path(sweep.base.measure.out)
    done = set() if force else completed_keys(out)
    todo = [r for r in runs if r.skip_reason is None and run_key(r.config.as_dict()) not in done]
    counts = {"ok": 0, "failed": 0, "oom": 0, "timeout": 0, "already done": 0, "skipped": 0, "re-run disturbed": 0}
    counts["skipped"] = sum(r.skip_reason is not None for r in runs)
    counts["already done"] = sum(r.skip_reason is None for r in runs) - len(todo)
    for run in runs:
        # Skipped points get a row too, so that the report lists them with the reason.
        if run.skip_reason is not None and (force or run_key(run.config.as_dict()) not in done):
            append_record(out, failure_record(run.config, "skipped", run.skip_reason, environment()))
    bar = tqdm(todo, desc="sweep", unit="run", file=sys.stderr, dynamic_ncols=True)
    for run in bar:
        bar.set_postfix_str(run.label)
        counts[_run_once(sweep, run, out, predictor)] += 1
    # A run the machine's other work disturbed is kept (marked) but left out of the comparisons;
    # once all rounds are done, each gets one more try on a quieter machine.
    disturbed = _disturbed_keys(out) if sweep.rerun_disturbed else set()
    again = [run for run in todo if run_key(run.config.as_dict()) in disturbed]
    for run in tqdm(again, desc="re-run disturbed", unit="run", file=sys.stderr, dynamic_ncols=True):
        log.warning("%s: disturbed by other work on the machine; running it once more", run.label)
        _run_once(sweep, run, out, predictor)
    counts["re-run disturbed"] = len(again)
    return counts


def _run_once(sweep: SweepConfig, run: PlannedRun, out: Path, predictor: SweepPredictor) -> str:
    """Runs one planned configuration; a failure becomes its row. Returns the outcome."""
    key = run_key(run.config.as_dict())
    rows_before = _rows_for(out, key)
    ended = run_child(run.config, sweep.run_timeout_s, child_log(out, run.label), predictor.env_for(run.config))
    predictor.after_run(run.config, out, measured=ended.status == "ok")
    if ended.status != "ok":
        log.warning("%s: %s: %s", run.label, ended.status, ended.reason)
        # A child that ran out of memory wrote its own row, with its memory figures.
        if _rows_for(out, key) == rows_before:
            row = failure_record(run.config, ended.status, ended.reason, environment(), duration_s=ended.seconds)
            append_record(out, row)
    return ended.status


def _disturbed_keys(out: Path) -> set[str]:
    """The configurations whose newest row is a run that other work on the machine disturbed (one read)."""
    newest = {run_key(r["config"]): r for r in read_records(out)[0] if isinstance(r.get("config"), dict)}
    return {key for key, row in newest.items() if row.get("disturbed")}


def _rows_for(out: Path, key: str) -> int:
    if not out.exists():
        return 0
    return sum(run_key(r["config"]) == key for r in read_records(out)[0] if isinstance(r.get("config"), dict))


def run_child(
    config: RunConfig, timeout_s: float, log_path: Path | None = None, extra_env: dict[str, str] | None = None
) -> ChildOutcome:
    """``bench run`` for one configuration in a fresh process (which launches torchrun's workers where it needs
    them); it validates its own command line, once, and hands its workers the result."""
    return launch.run_child(["run", *config_to_argv(config)], {**os.environ, **(extra_env or {})}, timeout_s,
                            log_path)


def child_log(out: Path, label: str) -> Path:
    """Where a sweep keeps a child's whole output: beside its results, named by its label."""
    return out.parent / f"{out.stem}.logs" / f"{file_name(label)}.log"


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
        default="strong",
        help="strong: --batch-size is the global batch at every device count, so strategies compare equal work; "
             "weak: --batch-size per device, with single run at every global batch (default: strong)",
    )
    parser.add_argument("--microbatches", type=comma_list(int), default=(1, 4), help="for mp and pp (default: 1,4)")
    parser.add_argument("--schedules", type=comma_list(str), default=("gpipe",), help="for pipelines (default: gpipe)")
    parser.add_argument("--reshard-after-forward", type=comma_list(_true_or_false), default=(True, False),
                        help="for fsdp: true (ZeRO-3), false (ZeRO-2) or both (default: true,false)")
    parser.add_argument("--run-timeout-s", type=float, default=600.0, help="limit per configuration (default: 600)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of every configuration, each a fresh process, round by round: the report's "
                             "intervals come from them (default: 3)")
    parser.add_argument("--calibration", default="auto",
                        help="predict every run from this bench calibrate file; auto: calibrate each model first "
                             "(or reuse its file beside --out); none: predict nothing (default: auto)")
    parser.add_argument("--rerun-disturbed", action=argparse.BooleanOptionalAction, default=True,
                        help="run once more, after the rounds, each run that other work on the machine disturbed; "
                             "--no-rerun-disturbed keeps them marked and runs nothing again, where the machine is "
                             "known to be shared (default: true)")
    parser.add_argument("--force", action="store_true", help="redo configurations that already have a row")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the skip reasons, run nothing")
    # Fewer steps than a single run: a sweep's cost is mostly process start-up, and 6 timed steps
    # after 3 warm-up ones already give a stable median on every preset. Three, not two: memory is
    # tracked over the first two, and a tracked step needs an untracked one after it (bench/harness/memory.py).
    add_config_arguments(parser, RunConfig, skip=SWEPT_FIELDS,
                         defaults={"out": "results/sweep.jsonl", "steps": 6, "warmup": 3})


# Fields that the sweep sets per point rather than taking from the command line.
SWEPT_FIELDS = ("strategy", "model", "devices", "microbatches", "schedule", "reshard_after_forward", "scaling",
                "repeat")


def _true_or_false(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(text)
    return text.strip().lower() == "true"


_true_or_false.__name__ = "true/false"


def main(args: argparse.Namespace) -> int:
    base = config_from_args(RunConfig, args, skip=SWEPT_FIELDS)
    try:
        # The strategies' own options are checked point by point; the rest once, here.
        neutral = unread_groups_reset(base)
        resolved_base = resolve(neutral)
        for name, values in (("--devices", args.devices), ("--microbatches", args.microbatches)):
            if values is not None and (not values or min(values) < 1):
                raise ConfigError(f"{name} must list numbers of at least 1, got {values}")
        if args.repeats < 1:
            raise ConfigError(f"--repeats must be at least 1, got {args.repeats}")
        if args.run_timeout_s <= 0:
            raise ConfigError(f"--run-timeout-s must be positive, got {args.run_timeout_s}")
        sweep = SweepConfig(
            strategies=args.strategies, models=args.models,
            devices=args.devices or default_device_counts(resolved_base.run.accelerator),
            base=base.with_flags(accelerator=resolved_base.run.accelerator),
            scaling=args.scaling, microbatches=args.microbatches, schedules=args.schedules,
            reshard_after_forward=args.reshard_after_forward,
            run_timeout_s=args.run_timeout_s, repeats=args.repeats, rerun_disturbed=args.rerun_disturbed,
        )
        for name in sweep.strategies:
            strategy_class(name)
        for name in sweep.models:
            resolve(neutral.with_flags(model=name))
        runs = plan(sweep)
        done = set() if args.force else completed_keys(Path(base.measure.out))
        check_calibration_choice(args.calibration)
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
        todo = [r.config for r in runs if r.skip_reason is None and run_key(r.config.as_dict()) not in done]
        try:
            predictor = sweep_predictor(args.calibration, todo, sweep.devices, sweep.microbatches,
                                        Path(base.measure.out))
        except ConfigError as exc:
            fail("bench sweep", str(exc))
        counts = execute(sweep, runs, force=args.force, predictor=predictor)
    except KeyboardInterrupt:
        print(
            f"bench sweep: interrupted; completed rows are kept in {base.measure.out}: run the same command to resume",
            file=sys.stderr,
        )
        return 130
    print("sweep: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f"  -> {base.measure.out}")
    return 0


__all__ = ["PlannedRun", "SweepConfig", "add_parser", "completed_keys", "execute", "main", "plan", "run_key"]
