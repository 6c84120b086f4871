"""``python -m bench verify``: every strategy against ``single`` on this machine, in a table.

Each strategy trains the tiny preset of each model for a few steps, with GroupNorm (so that
splitting the batch changes nothing), in its own process (torchrun where it needs one), and
saves a strategy-free checkpoint. The same run under ``single`` is the reference: losses and
final parameters must agree within fp32 tolerance. The rows go into the results file, where
the report puts the verdict next to each strategy's speed.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

import models
from bench.experiments.grid import run_key
from bench.experiments.sweep import run_child
from bench.harness.checkpoint import load_checkpoint
from bench.harness.cli_args import comma_list, fail
from bench.harness.config import ATOL, RTOL, RunConfig, checked_microbatches, resolve
from bench.harness.labels import VERIFIED_CLASS
from bench.harness.records import RECORD_VERSION, append_record, read_records
from strategies import REFERENCE, STRATEGIES, ConfigError, strategy_class
from strategies.mesh import DIMS, MeshLayout
from strategies.options import MeshOptions


def reference_config(model: str, folder: Path, steps: int) -> RunConfig:
    # 8 samples: divisible by 2 or 4 data-parallel ranks and by 4 micro-batches. fp32 and the
    # default memory format even on GPUs (whose default is bf16): the proof is held to fp32's tolerance.
    return RunConfig.from_flags(strategy=REFERENCE, model=model, preset="tiny", norm="group", batch_size=8, steps=steps,
                                warmup=0, seed=0, out=str(folder / "runs.jsonl"), accelerator="auto", precision="fp32",
                                channels_last=False)


def candidate(reference: RunConfig, strategy: str, devices: int, folder: Path, **options: Any) -> RunConfig:
    microbatches = options.pop("microbatches", checked_microbatches(strategy))
    name = "-".join([strategy, reference.workload.model, str(devices), *(f"{k}{v}" for k, v in options.items())])
    return reference.with_flags(strategy=strategy, devices=devices, microbatches=microbatches,
                                save_checkpoint=str(folder / f"{name}.pt"), **options)


def checked_class(config: RunConfig) -> dict[str, Any]:
    """The settings of the run a verdict was reached on, written into its row for the report to match."""
    degrees: dict[str, int | None] = dict.fromkeys(DIMS)
    if MeshOptions in strategy_class(config.strategy).reads:
        layout = MeshLayout.for_devices(config.run.devices, config.mesh.dp, config.mesh.pp, config.mesh.dp_shard,
                                        config.mesh.tp)
        degrees = dict(zip(DIMS, layout.shape, strict=True))
    flags = config.as_dict()
    return {**{name: flags[name] for name in VERIFIED_CLASS}, **degrees}


def compare(got: RunConfig, want: RunConfig, records: dict[str, dict]) -> tuple[float, float, bool]:
    """(largest parameter difference, largest loss difference, within tolerance)."""
    import torch

    got_state = load_checkpoint(str(got.checkpoint.save_checkpoint))
    want_state = load_checkpoint(str(want.checkpoint.save_checkpoint))
    if got_state.keys() != want_state.keys():
        return math.inf, math.inf, False
    param_diff = max((got_state[k].float() - v.float()).abs().max().item() for k, v in want_state.items())
    close = all(torch.allclose(got_state[k].float(), v.float(), rtol=RTOL, atol=ATOL) for k, v in want_state.items())
    got_losses = torch.tensor(records[run_key(got.as_dict())]["losses"])
    want_losses = torch.tensor(records[run_key(want.as_dict())]["losses"])
    loss_diff = (got_losses - want_losses).abs().max().item()
    return param_diff, loss_diff, close and torch.allclose(got_losses, want_losses, rtol=RTOL, atol=ATOL)


def candidates(strategy: str, model: str, devices: int) -> list[tuple[int, dict[str, int], str | None]]:
    """(devices, options, why skipped or None) of each run verify checks ``strategy`` by on ``model``: one at
    its smallest size (hybrid: 2 x 2), and the strategy's own ``verify_checks`` (hybrid's N-D meshes)."""
    cls = strategy_class(strategy)
    runs: list[tuple[int, dict[str, int], str | None]] = [(max(devices, cls.min_devices), {}, None)]
    for check in cls.verify_checks:
        reason = None if not check.models or model in check.models else (
            f"skipped: {', '.join(f'{k} {v}' for k, v in check.options.items())} is verified on "
            f"{', '.join(check.models)}")
        runs.append((check.devices, dict(check.options), reason))
    return runs


def check(want: RunConfig, strategy: str, devices: int, options: dict[str, int], folder: Path,
          timeout_s: float, skipped: str | None = None) -> dict[str, Any]:
    """Runs one candidate and compares it with the reference ``want`` (already run): the row's verdict fields.
    A candidate the configuration refuses, or one ``skipped`` says why not to run, is a skipped row."""
    degrees = {k: v for k, v in options.items() if k != "microbatches"}
    row: dict[str, Any] = {"devices": devices, **degrees}
    try:
        got = resolve(candidate(want, strategy, devices, folder, **options))
    except ConfigError as exc:
        return {**row, "passed": None, "reason": f"skipped: {exc}"}
    if skipped:
        return {**row, "passed": None, "reason": skipped}
    ended = run_child(got, timeout_s)
    if ended.status != "ok":
        return {**row, "reason": f"{ended.status}: {ended.reason}"}
    records = {run_key(r["config"]): r for r in read_records(folder / "runs.jsonl")[0]}
    param_diff, loss_diff, passed = compare(got, want, records)
    ran = records[run_key(got.as_dict())]
    row.update(max_param_diff=param_diff, max_loss_diff=loss_diff, passed=passed, emulated=ran["emulated"],
               **checked_class(got))
    if ran["device_count"] != devices:  # nn.DataParallel without GPUs: a pass-through
        row["reason"] = f"ran on {ran['device_count']} device(s), not {devices}"
    return row


def verify(strategies: tuple[str, ...], model_names: tuple[str, ...], devices: int, steps: int,
           timeout_s: float, done: Callable[[dict[str, Any]], None] = lambda row: None) -> list[dict[str, Any]]:
    """One verify row per strategy and model, and per hybrid mesh (skipped ones carry the reason); ``done``
    receives each row as it ends, so that a run cut short keeps the rows it finished."""
    plan = [(model, strategy, *run) for model in model_names for strategy in strategies
            for run in candidates(strategy, model, devices)]
    bar = tqdm(total=len(model_names) + len(plan), desc="verify", unit="run", file=sys.stderr, dynamic_ncols=True)
    rows, references = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        folder = Path(tmp)
        for model, strategy, size, options, skipped in plan:
            if model not in references:
                bar.set_postfix_str(f"single {model}")
                want = resolve(reference_config(model, folder,
                                                 steps).with_flags(save_checkpoint=str(folder / f"single-{model}.pt")))
                references[model] = want, run_child(want, timeout_s)
                bar.update()
            want, reference_run = references[model]
            bar.set_postfix_str(f"{strategy} {model} x{size}")
            row: dict[str, Any] = {
                "record_version": RECORD_VERSION, "kind": "verify", "strategy": strategy, "model": model,
                "devices": size, "max_param_diff": None, "max_loss_diff": None, "passed": False}
            rows.append(row)
            if reference_run.status != "ok":
                row["reason"] = f"reference run {reference_run.status}: {reference_run.reason}"
            else:
                row.update(check(want, strategy, size, options, folder, timeout_s, skipped))
            done(row)
            bar.update()
    bar.close()
    return rows


def verify_run(run: RunConfig, steps: int, timeout_s: float) -> dict[str, Any]:
    """``bench verify``'s verdict on the class of ``run`` (bench plan's measured candidates): the same strategy,
    devices, mesh, schedule and micro-batches, in fp32 at the run's global batch, against ``single`` at that
    batch, on the model's tiny preset, or on the run's own where the tiny one cannot take the split (fewer
    blocks than stages); the row's verdict fields."""
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        folder = Path(tmp)
        reference = reference_config(run.workload.model, folder, steps).with_flags(
            batch_size=run.run.batch_size, save_checkpoint=str(folder / "single.pt"))
        refusal = None
        for preset in dict.fromkeys(("tiny", run.workload.preset)):
            try:
                want = resolve(reference.with_flags(preset=preset))
                got = resolve(run.with_flags(preset=preset, norm="group", steps=steps, warmup=0, seed=0,
                                             out=reference.measure.out,
                    precision="fp32", channels_last=False, compile=False, profile=None, repeat=0,
                    save_checkpoint=str(folder / "got.pt")))
                break
            except ConfigError as exc:
                refusal = exc
        else:
            return {"passed": None, "reason": f"skipped: {refusal}"}
        for config in (want, got):
            ended = run_child(config, timeout_s)
            if ended.status != "ok":
                return {"passed": False, "reason": f"{config.strategy} {ended.status}: {ended.reason}"}
        records = {run_key(r["config"]): r for r in read_records(folder / "runs.jsonl")[0]}
        param_diff, loss_diff, passed = compare(got, want, records)
    return {"passed": passed, "max_param_diff": param_diff, "max_loss_diff": loss_diff, "preset": got.workload.preset,
            **checked_class(got)}


def row_label(row: dict[str, Any]) -> str:
    """``hybrid (dp-shard 2 x tp 2)``: the strategy, and hybrid's degrees of more than one rank."""
    degrees = [f"{name.replace('_', '-')} {row[name]}" for name in DIMS
               if isinstance(row.get(name), int) and row[name] > 1]
    return f"{row['strategy']} ({' x '.join(degrees)})" if degrees else str(row["strategy"])


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("verify", help="check every strategy against single on this machine's devices")
    others = tuple(name for name, cls in STRATEGIES.items() if not cls.is_reference)
    parser.add_argument("--strategies", type=comma_list(str), default=others, help="default: all but single")
    parser.add_argument("--models", type=comma_list(str), default=tuple(models.FAMILIES), help="default: all")
    parser.add_argument("--devices", type=int, default=2, help="devices per strategy (default: 2)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps compared (default: 3)")
    parser.add_argument("--run-timeout-s", type=float, default=300.0, help="limit per run (default: 300)")
    parser.add_argument("--out", default="results/verify.jsonl",
                        help="rows are appended here for the report (default: %(default)s)")


def main(args: argparse.Namespace) -> int:
    try:
        for name in args.strategies:
            strategy_class(name)
        for name in args.models:
            resolve(RunConfig.from_flags(model=name, preset="tiny", out=args.out))
        for flag, value in (("--devices", args.devices), ("--steps", args.steps)):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
    except ConfigError as exc:
        fail("bench verify", str(exc))
    rows = verify(args.strategies, args.models, args.devices, args.steps, args.run_timeout_s,
                  done=lambda row: append_record(args.out, row))
    print(f"{'strategy':<28} {'model':<11} {'devices':>7} {'max param diff':>15} {'max loss diff':>14}  result")
    for row in rows:
        verdict = {True: "pass", False: "FAIL", None: "skipped"}[row["passed"]]
        diff = "" if row["max_param_diff"] is None else f"{row['max_param_diff']:.2e}"
        loss = "" if row["max_loss_diff"] is None else f"{row['max_loss_diff']:.2e}"
        note = f"  ({row['reason']})" if row.get("reason") else ""
        print(f"{row_label(row):<28} {row['model']:<11} {row['devices']:>7} {diff:>15} {loss:>14}  {verdict}{note}")
    failed = [r for r in rows if r["passed"] is False]
    return 1 if failed else 0


__all__ = ["add_parser", "main", "verify", "verify_run"]
