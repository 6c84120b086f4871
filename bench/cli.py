"""``python -m bench``: run, list."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

import models
from bench.commands import plan as plan_cli
from bench.commands import predict as predict_cli
from bench.commands import report
from bench.commands.explain import add_explain_parser, cmd_explain
from bench.experiments import sweep, verify
from bench.experiments.fidelity import (
    ddp_fidelity_config,
    ddp_vs_plain_ddp,
    fidelity_record,
    fsdp_fidelity_config,
    fsdp_vs_plain_fsdp,
    pipeline_config,
    pp_vs_mp,
    single_vs_plain_loop,
)
from bench.harness import failures
from bench.harness.cli_args import OneLineParser, add_config_arguments, config_from_args, fail
from bench.harness.config import RunConfig, from_json, gpus_available, resolve, to_json
from bench.harness.environment import environment
from bench.harness.launch import RESOLVED_CONFIG_VARIABLE, launch_local, threads_per_process, under_torchrun
from bench.harness.logs import configure_logging
from bench.harness.ranks import torch_threads
from bench.harness.records import append_record, build_record, failure_record
from bench.harness.runner import train
from bench.predict.for_sweep import check_calibration_choice, pipeline_predictor
from strategies import STRATEGIES, ConfigError, Launch, strategy_class
from strategies.devices import devices_for, peak_memory
from strategies.options import BucketOptions, DDPOptions, MeshOptions, PipelineOptions, SplitOptions
from strategies.schedules import available_schedules

if TYPE_CHECKING:
    from bench.experiments.fidelity import FidelityResult

log = logging.getLogger("bench")

FIDELITY_FP32 = ("precision", "channels_last", "compile", "activation_checkpointing", "peak_tflops")
"""Knobs `bench fidelity` does not take: it compares the suite with plain fp32 loops, each as written."""
FIDELITY_FIXED = (
    *(f.name for group in (SplitOptions, PipelineOptions, MeshOptions, BucketOptions, DDPOptions)
      for f in dataclasses.fields(group)),
    "max_restarts", "save_checkpoint", "load_checkpoint", "scaling", "repeat", "profile",
)
"""Options `bench fidelity` does not offer: each comparison fixes its strategy's (the pp comparison its
split and schedule, the ddp one DDP's defaults as the tutorial has them); only fsdp's resharding is a choice."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="bench", description="Compare PyTorch parallelism strategies.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run = commands.add_parser("run", help="train one configuration, time it, append its record")
    add_config_arguments(run, RunConfig)
    commands.add_parser("list", help="strategies, models, presets and the devices found")
    add_explain_parser(commands)
    sweep.add_parser(commands)
    report.add_parser(commands)
    verify.add_parser(commands)
    predict_cli.add_parsers(commands)
    plan_cli.add_parser(commands)
    fidelity = commands.add_parser("fidelity", help="time the harness against hand-written loops, side by side")
    add_config_arguments(fidelity, RunConfig, skip=("strategy", "devices", "optimizer", "lr", "out", *FIDELITY_FP32,
                                                    *FIDELITY_FIXED))
    fidelity.add_argument("--rounds", type=int, default=6, help="alternating rounds per comparison (default: 6)")
    fidelity.add_argument("--calibration", default="auto",
                          help="explain pp's gap to the ideal with this bench calibrate file of mlp small; auto: "
                               "the one beside --out (as bench sweep leaves it), else calibrate first; none: "
                               "do not (default: auto)")
    fidelity.add_argument("--out", default="results/fidelity.jsonl",
                          help="one record per comparison, read by bench report (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.command == "list":
        return cmd_list()
    if args.command == "run":
        return cmd_run(args, argv)
    if args.command == "verify":
        return verify.main(args)
    if args.command == "report":
        return report.main(args)
    if args.command == "sweep":
        return sweep.main(args)
    if args.command == "explain":
        return cmd_explain(args)
    if args.command == "fidelity":
        return cmd_fidelity(args)
    if args.command == "calibrate":
        return predict_cli.calibrate_main(args)
    if args.command == "predict":
        return predict_cli.predict_main(args)
    if args.command == "plan":
        return plan_cli.main(args)
    raise AssertionError(args.command)


def cmd_list() -> int:
    print("strategies:")
    for name, cls in STRATEGIES.items():
        print(f"  {name:<8} {cls.launch.value:<11} {cls.description}")
    print(f"models:     {', '.join(models.FAMILIES)}  (or package.module:function)")
    print(f"presets:    {', '.join(models.PRESETS)}")
    print(f"schedules:  {', '.join(available_schedules())}  (pp, hybrid: --schedule)")
    gpus = gpus_available()
    names = [torch.cuda.get_device_name(i) for i in range(gpus)]
    print(
        f"devices:    {gpus} GPU(s){': ' + ', '.join(names) if names else ''}; CPU with {threads_per_process(1)} cores"
    )
    return 0


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        # on one thread: a launcher whose OpenMP threads exist cannot fork its workers (launch.worker_start_method)
        with nullcontext() if under_torchrun() else torch_threads(1):
            config = run_config(args)
    except ConfigError as exc:
        if under_torchrun() and int(os.environ.get("RANK", "0")) != 0:
            # Every worker of a user's torchrun sees the same bad input; one line is enough. torchrun then
            # reports its failed workers itself (exit 1), which no worker can silence.
            raise SystemExit(2) from None
        fail("bench run", str(exc))
    if strategy_class(config.strategy).launch is Launch.PER_DEVICE and not under_torchrun():
        return launch_local(config.run.devices, argv, config.run.accelerator, config.measure.max_restarts,
                            to_json(config))
    if under_torchrun() and config.run.accelerator == "cpu":
        torch.set_num_threads(threads_per_process(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    rank = int(os.environ.get("RANK", "0"))
    failures.note_started(rank)
    try:
        result = train(config)
    except BaseException as exc:
        failures.note_failure(rank, exc)
        if failures.is_out_of_memory(exc):
            return _out_of_memory(config, exc)
        raise
    failures.note_done(rank)
    if result.topology.rank != 0:
        return 0
    record = build_record(config, result, environment())
    append_record(config.measure.out, record)
    print(summary_line(record) + f"  -> {config.measure.out}")
    return 0


def run_config(args: argparse.Namespace) -> RunConfig:
    """The resolved configuration of this process: the launcher's, as it handed it to its torchrun
    workers, or the command line's, validated here (the launcher itself, or a user's own torchrun)."""
    resolved = os.environ.get(RESOLVED_CONFIG_VARIABLE)
    if under_torchrun() and resolved:
        return from_json(resolved)
    return resolve(config_from_args(RunConfig, args))


def _out_of_memory(config: RunConfig, exc: BaseException) -> int:
    """An ``oom`` row with this process's memory figures, one line on stderr, exit code 3."""
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    devices = devices_for(config.run.accelerator, 1, first=local) if under_torchrun() else devices_for(
        config.run.accelerator, config.run.devices)
    reason = f"rank {rank}: {failures.describe_error(exc)}"
    append_record(config.measure.out, failure_record(config, "oom", reason, environment(),
                                                     peak_mem=peak_memory(devices)))
    print(f"bench run: out of memory on rank {rank}: {failures.describe_error(exc)}", file=sys.stderr)
    return 3


def cmd_fidelity(args: argparse.Namespace) -> int:
    try:
        # --out reaches the config, so resolve checks it is writable before anything runs, as for bench run.
        # The baselines are the tutorials' fp32 loops: the suite's side runs as they do, whatever the GPU default.
        config = resolve(config_from_args(RunConfig, args).with_flags(precision="fp32", channels_last=False))
        ddp_config = ddp_fidelity_config(config)
        fsdp_config = fsdp_fidelity_config(config)
        if args.rounds < 1:
            raise ConfigError(f"--rounds must be at least 1, got {args.rounds}")
        pipelines = config.run.accelerator == "cpu" or torch.cuda.device_count() >= 2
        check_calibration_choice(args.calibration)
        predictor = pipeline_predictor(args.calibration, pipeline_config(config),
                                       Path(config.measure.out)) if pipelines \
            else None
    except ConfigError as exc:
        fail("bench fidelity", str(exc))
    env = environment()
    verdicts: list[bool | None] = []

    def record(result: FidelityResult) -> None:
        # Each result is kept as soon as it is measured: an interrupted run loses only the one under way.
        print(result.line())
        append_record(config.measure.out, fidelity_record(result, config, args.rounds, env))
        verdicts.append(result.met)

    comparison = single_vs_plain_loop(config, args.rounds)
    print(f"{config.workload.model}/{config.workload.preset}, batch {config.run.batch_size}, {config.run.accelerator}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds x {config.measure.steps} steps")
    record(comparison)
    if ddp_config is not None:
        record(ddp_vs_plain_ddp(ddp_config, args.rounds))
    if fsdp_config is not None:
        record(fsdp_vs_plain_fsdp(fsdp_config, args.rounds))
    if pipelines:
        speedups, bubbles = pp_vs_mp(config, args.rounds, predictor=predictor)
        # each is a FidelityResult; their common base, FigureAndLine, is not
        results: list[FidelityResult] = [*speedups, *bubbles]
        for result in results:
            record(result)
    held = [v for v in verdicts if v is not None]
    print(f"fidelity: {sum(held)} of {len(held)} targets met  -> {config.measure.out}")
    return 0


def summary_line(record: dict) -> str:
    emulated = " (emulated)" if record["emulated"] else ""
    return (
        f"{record['strategy']} {record['model']}/{record['preset']} on {record['device_count']} "
        f"{record['accelerator']} device(s){emulated}: "
        f"{record['step_time_ms_median']:.1f} ms/step (IQR {record['step_time_ms_iqr']:.1f}), "
        f"{record['samples_per_s']:.1f} samples/s, loss {record['loss_first']:.4f} -> {record['loss_last']:.4f}"
    )
