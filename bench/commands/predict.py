"""``bench calibrate`` and ``bench predict``: measure this machine into one file, then predict from it."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

import models
from bench.harness.cli_args import DefaultsShown, add_config_arguments, comma_list, fail
from bench.harness.config import RunConfig, resolve
from bench.harness.environment import environment
from bench.harness.paths import check_writable
from bench.harness.records import append_record
from bench.predict.calibrate import calibrate, machine_identity
from bench.predict.calibration import Calibration
from bench.predict.collectives import GROUPS
from bench.predict.compute import Disturbed
from bench.predict.costs import CostSource, predicted_strategies
from bench.predict.hardware import PRECISIONS, PROFILES, RooflineSource, profile
from bench.predict.record import prediction_record
from bench.predict.serves import nearest_count_notes
from bench.predict.what_if import print_predictions, what_if_fields
from strategies import ConfigError, strategy_class
from strategies.options import MeshOptions, SplitOptions

log = logging.getLogger(__name__)

OUT = {"published": "results/published.jsonl", "hardware": "results/what_if.jsonl",
       "calibration": "results/predictions.jsonl"}
"""--out's default by what predict predicts from (the README reads results/what_if.jsonl after --hardware)."""


def add_parsers(commands: argparse._SubParsersAction) -> None:
    defaults = DefaultsShown
    calibrate = commands.add_parser("calibrate", help="measure this machine's compute and communication for predict",
                                    formatter_class=defaults)
    calibrate.add_argument("--model", default="mlp", help="model family or package.module:function")
    calibrate.add_argument("--preset", default="small", help="the family's preset")
    calibrate.add_argument("--norm", default="group", help="cnn normalisation")
    calibrate.add_argument("--batch-size", type=int, default=None, help="global batch (None: the preset's)")
    calibrate.add_argument("--devices", type=comma_list(int), default=(1, 2), help="device counts to prepare for")
    calibrate.add_argument("--microbatches", type=comma_list(int), default=(1, 4), help="micro-batch counts")
    calibrate.add_argument("--collective-max-mib", type=int, default=256, help="largest message")
    calibrate.add_argument("--repeats", type=int, default=5, help="timings per block and batch size")
    calibrate.add_argument("--groups", type=int, default=GROUPS,
                           help="groups of processes the collectives and the runtimes' reference runs are measured "
                                "in, each figure the median over them (1 is quicker, noisier)")
    calibrate.add_argument("--out", default="results/calibration.json", help="the calibration file")
    predict = commands.add_parser("predict", help="predict step time, memory and bubble from a calibration, a "
                                                  "hardware profile, or for every row of a published file",
                                  formatter_class=defaults)
    predict.add_argument("--calibration", default="results/calibration.json", help="a bench calibrate file")
    predict.add_argument("--model", default="mlp", help="model family")
    predict.add_argument("--preset", default="small", help="the family's preset")
    predict.add_argument("--strategies", type=comma_list(str), default=("single", "ddp", "pp"), help="strategies")
    predict.add_argument("--devices", type=comma_list(int), default=(1, 2), help="device counts")
    predict.add_argument("--batch-size", type=int, default=None, help="global batch (None: the preset's)")
    predict.add_argument("--microbatches", type=int, default=4, help="pipeline micro-batches")
    predict.add_argument("--schedule", default="gpipe", help="pipeline schedule")
    add_config_arguments(predict, MeshOptions)  # hybrid's degrees, as bench run takes them
    predict.add_argument("--hardware", default=None,
                         help=f"predict for a GPU profile instead of this machine: {', '.join(PROFILES)} (nodes of "
                              "8; h200-node is one node, no network)")
    predict.add_argument("--precision", default=None, help=f"with --hardware: {', '.join(PRECISIONS)} (None: bf16)")
    predict.add_argument("--scaling", choices=("weak", "strong"), default=None,
                         help="weak: --batch-size per device (None: weak with --hardware); strong: the global batch")
    predict.add_argument("--published", default=None, metavar="FILE",
                         help="predict every row of FILE (the columns of ../shared/published/train.csv) and print "
                              "the error against each published value")
    predict.add_argument("--out", default=None,
                         help=f"records (None: {OUT['calibration']}; with --hardware {OUT['hardware']}; with "
                              f"--published {OUT['published']})")


def calibrate_main(args: argparse.Namespace) -> int:
    try:
        config = resolve(RunConfig.from_flags(model=args.model, preset=args.preset, norm=args.norm,
                                              batch_size=args.batch_size,
                                   out=str(Path(args.out).with_suffix(".jsonl")), precision="fp32"))
        if min(args.devices) < 1 or min(args.microbatches) < 1 or args.repeats < 1 or args.groups < 1:
            raise ConfigError(f"--devices, --microbatches, --repeats and --groups must be at least 1, got "
                              f"{args.devices}, {args.microbatches}, {args.repeats} and {args.groups}")
        check_writable(Path(args.out))
    except (ConfigError, OSError) as exc:
        fail("bench calibrate", str(exc))
    try:
        calibration = calibrate(config, args.devices, args.microbatches, args.collective_max_mib * 2**20,
                                args.repeats, args.groups)
    except Disturbed as exc:
        fail("bench calibrate", str(exc))
    calibration.save(Path(args.out))
    workload = config.workload
    print(f"calibration: {workload.model}/{workload.preset} on {calibration.machine['hostname']} -> {args.out}")
    return 0


def predict_main(args: argparse.Namespace) -> int:
    if args.published:
        from bench.commands.published import published_main  # reads CSVs, imports no process machinery

        return published_main(args, OUT["published"])
    args.out = args.out or OUT["hardware" if args.hardware else "calibration"]
    source: CostSource
    try:
        if args.hardware:
            hardware = profile(args.hardware, args.devices)
            norm, precision = "batch", args.precision or "bf16"
            roofline = RooflineSource(hardware, args.model, args.preset, norm, precision)
            source = roofline
            label = f"achievable shares of {hardware.source}"
        else:
            calibration = Calibration.load(Path(args.calibration))
            calibration.check_matches(machine_identity(environment()), args.model, args.preset)
            source, norm, precision = calibration, calibration.norm, "fp32"
            label = f"calibration {args.calibration} ({calibration.machine['hostname']})"
        scaling = args.scaling or ("weak" if args.hardware else "strong")
        configs = _configs(args, norm, scaling)
    except ConfigError as exc:
        fail("bench predict", str(exc))
    records = []
    for config in configs:
        try:
            record: dict[str, Any] = prediction_record(source, config, label)
        except ValueError as exc:
            log.warning("%s on %d device(s) not predicted: %s", config.strategy, config.run.devices, exc)
            continue
        if not args.hardware:
            record["notes"] = [*record["notes"], *nearest_count_notes(calibration, config.run.devices)]
        records.append(record)
    rests_on = what_if_fields(records, roofline, hardware, precision, scaling) if args.hardware else None
    for record in records:
        append_record(args.out, record)
    print_predictions(records, rests_on)
    return 0


def _configs(args: argparse.Namespace, norm: str, scaling: str) -> list[RunConfig]:
    """One resolved configuration per strategy and device count; points the strategy cannot run are left
    out with a warning (pp beyond the model's blocks, tp on a model without a plan)."""
    configs = []
    for name in args.strategies:
        strategy_class(name)
        if name not in predicted_strategies():
            raise ConfigError(f"no cost model for {name}; predicted: {', '.join(predicted_strategies())}")
    degrees = {f.name: getattr(args, f.name) for f in dataclasses.fields(MeshOptions)}  # hybrid's mesh
    for name in args.strategies:
        for devices in args.devices:
            batch = args.batch_size
            if scaling == "weak":  # --batch-size (or the preset's) per device
                batch = (batch or _default_batch(args.model, args.preset)) * devices
            reads = strategy_class(name).reads
            config = RunConfig.from_flags(strategy=name, model=args.model, preset=args.preset, devices=devices,
                                          batch_size=batch, norm=norm, out=args.out, accelerator="cpu",
                                          schedule=args.schedule,
                                          microbatches=args.microbatches if SplitOptions in reads else 1,
                                          **(degrees if MeshOptions in reads else {}))
            try:
                configs.append(resolve(config))
            except ConfigError as exc:
                log.warning("%s on %d device(s) not predicted: %s", name, devices, exc)
    return configs


def _default_batch(model: str, preset: str) -> int:
    import torch

    with torch.device("meta"):
        return models.build_model(model, preset).default_batch_size
