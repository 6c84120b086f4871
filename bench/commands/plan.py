"""``python -m bench plan``: the best configuration for a model on a cluster (or this machine), searched over every
strategy and mesh the model admits, PREDICTED, ranked, explained, with the commands that run it."""

from __future__ import annotations

import argparse
import datetime
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.experiments.planner.commands import commands
from bench.experiments.planner.measure import Measured, first_pick_in_measured_tie, measure, rank_correlation
from bench.experiments.planner.search import Candidate, PlanResult, search, tied_with_first, why_slower
from bench.experiments.planner.space import SearchSpace
from bench.harness.cli_args import comma_list, fail
from bench.harness.config import RunConfig
from bench.harness.environment import environment
from bench.harness.labels import run_label
from bench.harness.paths import check_writable
from bench.harness.records import RECORD_VERSION, append_record
from bench.predict.calibrate import machine_identity
from bench.predict.calibration import Calibration
from bench.predict.costs import CostSource
from bench.predict.hardware import RooflineSource, profile
from bench.predict.record import prediction_record
from strategies import STRATEGIES, ConfigError, strategy_class
from strategies.ddp import DistributedDataParallelStrategy
from strategies.schedules import available_schedules

log = logging.getLogger(__name__)

GIB = 2**30
CPU_GPUS_PER_NODE = 1 << 30
"""A calibration of this machine plans for this machine: one node, however many emulated devices."""


def add_parser(commands_: argparse._SubParsersAction) -> None:
    plan = commands_.add_parser("plan", help="search every strategy and mesh for the best configuration (PREDICTED)")
    plan.add_argument("--model", default="transformer", help="family or package.module:function (default: %(default)s)")
    plan.add_argument("--preset", default="large", help="(default: %(default)s)")
    plan.add_argument("--devices", type=int, required=True, help="devices of the cluster (or of this machine)")
    plan.add_argument("--hardware", default=None, help="a profile of bench predict --hardware, e.g. h200")
    plan.add_argument("--calibration", default=None,
                      help="a bench calibrate file of this machine (instead of --hardware)")
    plan.add_argument("--global-batch", type=int, default=None,
                      help="samples per optimizer step (default: a --calibration's own, the batch its blocks were "
                           "timed up to; with --hardware the preset's batch per device x --devices)")
    plan.add_argument("--memory-headroom", type=float, default=0.10,
                      help="share of each device's memory left free (default: %(default)s)")
    plan.add_argument("--top", type=int, default=5, help="candidates to show and record (default: %(default)s)")
    plan.add_argument("--strategies", type=comma_list(str), default=tuple(STRATEGIES), help="(default: all)")
    plan.add_argument("--schedules", type=comma_list(str), default=None,
                      help="pipeline schedules to weigh (default: those this torch offers)")
    plan.add_argument("--microbatches", type=comma_list(int), default=(1, 2, 4, 8, 16, 32),
                      help="micro-batch counts to weigh (default: 1,2,4,8,16,32)")
    plan.add_argument("--tie-band", type=float, default=0.05,
                      help="candidates predicted within this share of the best are a tie (default: %(default)s)")
    plan.add_argument("--precision", default="bf16", help="with --hardware: bf16, tf32 or fp32 (default: bf16)")
    plan.add_argument("--out", default="results/plan.jsonl", help="records of kind plan (default: %(default)s)")
    measure = plan.add_argument_group("checked where it runs (with --calibration: this machine's devices)")
    measure.add_argument("--measure", type=_count_or_all, default=0,
                         help="run the top K candidates (or all), and the best ddp one, with repeats, as bench sweep "
                              "does, and hold the measured order against the predicted (default: none)")
    measure.add_argument("--repeats", type=int, default=3, help="runs of each measured candidate (default: 3)")
    measure.add_argument("--steps", type=int, default=6, help="timed steps of each run (default: 6)")
    measure.add_argument("--warmup", type=int, default=2, help="untimed steps of each run (default: 2)")
    measure.add_argument("--verify-steps", type=int, default=3,
                         help="steps of bench verify's check of each measured candidate against single on the tiny "
                              "preset (0: no check; default: 3)")
    measure.add_argument("--run-timeout-s", type=float, default=600.0, help="limit per run (default: 600)")
    measure.add_argument("--measured-out", default=None,
                         help="the measured runs' records (default: beside --out, <stem>-measured.jsonl)")


def _count_or_all(text: str) -> int:
    """``--measure``: a number of candidates, or ``all`` (every one that fits)."""
    return ALL if text == "all" else int(text)


ALL = 1 << 30


def main(args: argparse.Namespace) -> int:
    try:
        _check(args)
        source, label, norm, budget, per_node = _source(args)
        space = SearchSpace(args.model, args.preset, args.devices, args.global_batch or _default_batch(args, source),
                            tuple(args.strategies), tuple(args.schedules or available_schedules()),
                            tuple(args.microbatches), norm=norm, precision=args.precision if args.hardware else "fp32")
        check_writable(Path(args.out))
    except ConfigError as exc:
        fail("bench plan", str(exc))
    base = RunConfig.from_flags(accelerator="cpu",
                                out=args.out)  # resolved on this machine's rules, whatever its devices

    def progress(items: Iterable[RunConfig]) -> Iterable[RunConfig]:
        return tqdm(items, desc="bench plan", unit="candidate", leave=False, disable=None, mininterval=1.0)

    result = search(space, base, source, label, prediction_record, budget, progress)
    if not result.ranked:
        fail("bench plan", _nothing_fits(result, space, budget))
    _print(result, args, label, budget, per_node)
    measured = _measure(result, args) if args.measure else {}
    tied = tied_with_first(result.ranked, args.tie_band)
    for rank, candidate in enumerate(result.ranked[:max(args.top, len(measured))]):
        above = result.ranked[rank - 1] if rank else None
        record = _record(candidate, rank + 1, above, tied[rank], result, space, label, per_node)
        if rank + 1 in measured:
            m = measured[rank + 1]
            record.update(measured_samples_per_s=m.median, measured_interval=m.interval,
                          measured_repeats=len(m.samples_per_s), verified=m.verified, verify=m.verdict)
        append_record(args.out, record)
    print(f"  -> {args.out}")
    return 0


def _measure(result: PlanResult, args: argparse.Namespace) -> dict[int, Measured]:
    """Runs the chosen candidates here and prints predicted against measured; keyed by predicted rank."""
    chosen = result.ranked[:args.measure]
    baseline = DistributedDataParallelStrategy.name  # plain data parallelism, measured always
    ddp = next((c for c in result.ranked if c.config.strategy == baseline), None)
    if ddp is not None and ddp not in chosen:
        chosen.append(ddp)
    out = Path(args.measured_out or Path(args.out).with_name(Path(args.out).stem + "-measured.jsonl"))
    measured = measure(chosen, out, args.repeats, args.steps, args.warmup, args.run_timeout_s, args.verify_steps)
    ranks = {id(c): i + 1 for i, c in enumerate(result.ranked)}
    by_rank = {ranks[id(m.candidate)]: m for m in measured}
    ran = [m for m in measured if m.median is not None]
    correlation = rank_correlation([m.candidate.samples_per_s for m in ran], [m.median or 0.0 for m in ran])
    print(f"  measured here ({args.repeats} repeats each, -> {out}):")
    order = sorted(ran, key=lambda m: -(m.median or 0.0))
    for m in measured:
        interval = f"[{m.interval[0]:.1f}, {m.interval[1]:.1f}]" if m.interval else "(one repeat)"
        place = f"measured #{order.index(m) + 1}" if m in order else "no undisturbed run"
        print(f"    predicted #{ranks[id(m.candidate)]:<3} {_label(m.candidate):<40} predicted "
              f"{m.candidate.samples_per_s:10.1f}  measured {m.median or float('nan'):10.1f} {interval}  {place}, "
              f"verify: {m.verified}")
    inside = first_pick_in_measured_tie([by_rank[k] for k in sorted(by_rank)])
    print(f"  rank correlation, predicted vs measured: "
          f"{'n/a' if correlation is None else f'{correlation:.2f}'}; the first pick "
          + {True: "is within the measured best's interval", False: "is NOT within the measured best's interval",
             None: "cannot be judged (too few undisturbed repeats)"}[inside])
    return by_rank


def _check(args: argparse.Namespace) -> None:
    if (args.hardware is None) == (args.calibration is None):
        raise ConfigError("give one of --hardware (a profile, e.g. h200) or --calibration (a bench calibrate file)")
    if args.devices < 1:
        raise ConfigError(f"--devices must be at least 1, got {args.devices}")
    if not 0 <= args.memory_headroom < 1:
        raise ConfigError(f"--memory-headroom is a share of the device's memory in [0, 1), got {args.memory_headroom}")
    if args.top < 1:
        raise ConfigError(f"--top must be at least 1, got {args.top}")
    for name in args.strategies:
        strategy_class(name)
    if args.measure and args.hardware:
        raise ConfigError("--measure runs the candidates on this machine: plan with --calibration of it, "
                          "not a --hardware profile")
    for flag, value in (("--measure", args.measure), ("--repeats", args.repeats), ("--steps", args.steps)):
        if value < (0 if flag == "--measure" else 1):
            raise ConfigError(f"{flag} must be at least {0 if flag == '--measure' else 1}, got {value}")
    if args.global_batch is not None and args.global_batch < 1:
        raise ConfigError(f"--global-batch must be at least 1, got {args.global_batch}")


def _source(args: argparse.Namespace) -> tuple[CostSource, str, str, float | None, int]:
    """The cost source, its label, the norm it models, the memory budget per device and the GPUs per node."""
    if args.hardware:
        hardware = profile(args.hardware, (args.devices,))
        if args.precision not in hardware.gpu.peak_flops:
            raise ConfigError(f"--precision {args.precision}: {hardware.name} has "
                              f"{', '.join(hardware.gpu.peak_flops)}")
        source = RooflineSource(hardware, args.model, args.preset, "batch", args.precision)
        budget = hardware.memory_bytes * (1 - args.memory_headroom)
        return source, f"achievable shares of {hardware.source}", "batch", budget, hardware.node_size
    calibration = Calibration.load(Path(args.calibration))
    calibration.check_matches(machine_identity(environment()), args.model, args.preset)
    return calibration, f"calibration {args.calibration}", calibration.norm, None, CPU_GPUS_PER_NODE


def _default_batch(args: argparse.Namespace, source: CostSource) -> int:
    """A calibration's own global batch (the one it was calibrated for; in a file from before the field, its
    one-process canary's, else the largest its blocks were timed at); for a hardware profile, the preset's batch
    per device on every device."""
    if isinstance(source, Calibration):
        return (source.global_batch or max((c.batch for c in source.canaries), default=0)
                or int(max(n for n, _ in source.blocks(1)[0].forward_ms.points)))
    import torch

    import models

    with torch.device("meta"):
        return models.build_model(args.model, args.preset).default_batch_size * args.devices


def _nothing_fits(result: PlanResult, space: SearchSpace, budget: float | None) -> str:
    if result.too_big and budget is not None:
        smallest = result.too_big[0]
        return (f"nothing fits in {budget / GIB:.1f} GiB per device: the smallest of {len(result.too_big)} "
                f"candidates, {_label(smallest)}, needs {smallest.memory_bytes / GIB:.1f} GiB (predicted); "
                "use more --devices, a smaller --global-batch or less --memory-headroom")
    reasons = "; ".join(f"{reason} ({n}x)" for reason, n in (result.refused + result.unpredicted).most_common(3))
    return (f"no configuration of {space.model}/{space.preset} on {space.devices} device(s) at global batch "
            f"{space.global_batch} can run or be predicted: {reasons or 'no candidate'}")


def _label(c: Candidate) -> str:
    return run_label(c.config.as_dict()).rsplit(" #", 1)[0]


def _print(result: PlanResult, args: argparse.Namespace, label: str, budget: float | None, per_node: int) -> None:
    print(f"bench plan: {args.model}/{args.preset} on {args.devices} device(s), PREDICTED from {label}")
    print(f"  weighed {result.weighed} configurations in {result.seconds:.1f} s: {len(result.ranked)} fit, "
          f"{len(result.too_big)} do not fit, {sum(result.refused.values())} refused by the runner's rules, "
          f"{sum(result.unpredicted.values())} without a cost model, {result.duplicates} duplicates")
    tied = tied_with_first(result.ranked, args.tie_band)
    for rank, c in enumerate(result.ranked[:args.top]):
        mark = "tie" if rank and tied[rank] else ("best" if rank == 0 else "")
        print(f"  {rank + 1:>2}. {_label(c):<40} {c.samples_per_s:12.1f} samples/s  "
              f"{c.memory_bytes / GIB:7.2f} GiB/device  {mark}")
        if rank:
            print(f"      slower than #{rank}: {why_slower(c, result.ranked[rank - 1])}")
    run = commands(result.ranked[0].asked, per_node)
    print(f"  run the best: {run.bench}")
    if run.torchrun:
        print(f"  on every node: {run.torchrun}")
        print(f"  with Slurm:    {run.slurm}")


def _record(c: Candidate, rank: int, above: Candidate | None, tied: bool, result: PlanResult, space: SearchSpace,
            label: str, per_node: int) -> dict[str, Any]:
    run = commands(c.asked, per_node)
    p = c.prediction
    return {
        "record_version": RECORD_VERSION, "kind": "plan", "status": "ok",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "plan_rank": rank, "label": _label(c), "strategy": c.config.strategy, "model": space.model,
        "preset": space.preset, "device_count": space.devices, "global_batch_size": space.global_batch,
        "config": c.config.as_dict(), "source": label,
        "predicted_samples_per_s": c.samples_per_s, "predicted_step_time_ms": c.step_ms,
        "predicted_memory_bytes_per_device": c.memory_bytes, "predicted_bubble": p.get("predicted_bubble"),
        "predicted_exposed_comm_ms": p.get("predicted_exposed_comm_ms"), "predicted_terms_ms": c.terms_ms(),
        "tie_with_best": tied, "slower_than_above": why_slower(c, above) if above else None,
        "command": run.bench, "torchrun_command": run.torchrun, "slurm_command": run.slurm,
        "searched": {"weighed": result.weighed, "fit": len(result.ranked), "too_big": len(result.too_big),
                     "refused": dict(result.refused), "unpredicted": dict(result.unpredicted),
                     "duplicates": result.duplicates, "seconds": round(result.seconds, 2)},
    }
