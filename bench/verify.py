"""``python -m bench verify``: every strategy against ``single`` on this machine, in a table.

Each strategy trains the tiny preset of each model for a few steps, with GroupNorm (so that
splitting the batch changes nothing), in its own process (torchrun where it needs one), and
saves a strategy-free checkpoint. The same run under ``single`` is the reference: losses and
final parameters must agree within fp32 tolerance. The rows go into the results file, where
the report puts the verdict next to each strategy's speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
from pathlib import Path

import models
from bench.checkpoint import load_checkpoint
from bench.cli_args import comma_list, fail
from bench.config import ATOL, RTOL, RunConfig, checked_microbatches, resolve
from bench.plan import run_key
from bench.records import RECORD_VERSION, append_record, read_records
from bench.sweep import run_child
from strategies import STRATEGIES, ConfigError, strategy_class


def reference_config(model: str, folder: Path, steps: int) -> RunConfig:
    # 8 samples: divisible by 2 or 4 data-parallel ranks and by 4 micro-batches. fp32 and the
    # default memory format even on GPUs (whose default is bf16): the proof is held to fp32's tolerance.
    return RunConfig(strategy="single", model=model, preset="tiny", norm="group", batch_size=8, steps=steps,
                     warmup=0, seed=0, out=str(folder / "runs.jsonl"), accelerator="auto", precision="fp32",
                     channels_last=False)


def candidate(reference: RunConfig, strategy: str, devices: int, folder: Path) -> RunConfig:
    return dataclasses.replace(
        reference, strategy=strategy, devices=devices, microbatches=checked_microbatches(strategy),
        save_checkpoint=str(folder / f"{strategy}-{reference.model}-{devices}.pt"),
    )


EQUIVALENCE_CLASS = ("norm", "schedule", "microbatches", "precision")
"""With strategy and model, what a verdict covers: a sweep row differing in any of these was not checked."""


def checked_class(config: RunConfig) -> dict[str, object]:
    """The settings of the run a verdict was reached on, written into its row for the report to match."""
    return {name: getattr(config, name) for name in EQUIVALENCE_CLASS}


def compare(got: RunConfig, want: RunConfig, records: dict[str, dict]) -> tuple[float, float, bool]:
    """(largest parameter difference, largest loss difference, within tolerance)."""
    import torch

    got_state = load_checkpoint(got.save_checkpoint)
    want_state = load_checkpoint(want.save_checkpoint)
    if got_state.keys() != want_state.keys():
        return math.inf, math.inf, False
    param_diff = max((got_state[k].float() - v.float()).abs().max().item() for k, v in want_state.items())
    close = all(torch.allclose(got_state[k].float(), v.float(), rtol=RTOL, atol=ATOL) for k, v in want_state.items())
    got_losses = torch.tensor(records[run_key(got.as_dict())]["losses"])
    want_losses = torch.tensor(records[run_key(want.as_dict())]["losses"])
    loss_diff = (got_losses - want_losses).abs().max().item()
    return param_diff, loss_diff, close and torch.allclose(got_losses, want_losses, rtol=RTOL, atol=ATOL)


def verify(strategies: tuple[str, ...], model_names: tuple[str, ...], devices: int, steps: int,
           timeout_s: float) -> list[dict[str, object]]:
    """One verify row per strategy and model (skipped ones carry the reason)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        folder = Path(tmp)
        for model in model_names:
            want = resolve(dataclasses.replace(reference_config(model, folder, steps),
                                               save_checkpoint=str(folder / f"single-{model}.pt")))
            reference_run = run_child(want, timeout_s)
            status, reason = reference_run.status, reference_run.reason
            for strategy in strategies:
                row = {"record_version": RECORD_VERSION, "kind": "verify", "strategy": strategy, "model": model,
                       "devices": devices, "max_param_diff": None, "max_loss_diff": None, "passed": False}
                rows.append(row)
                if status != "ok":
                    row["reason"] = f"reference run {status}: {reason}"
                    continue
                # A strategy that needs more devices (hybrid: 2 x 2) is checked at its smallest size.
                row["devices"] = max(devices, STRATEGIES[strategy].min_devices)
                try:
                    got = resolve(candidate(want, strategy, row["devices"], folder))
                except ConfigError as exc:
                    row.update(passed=None, reason=f"skipped: {exc}")
                    continue
                ended = run_child(got, timeout_s)
                if ended.status != "ok":
                    row["reason"] = f"{ended.status}: {ended.reason}"
                    continue
                records = {run_key(r["config"]): r for r in read_records(folder / "runs.jsonl")[0]}
                param_diff, loss_diff, passed = compare(got, want, records)
                ran = records[run_key(got.as_dict())]
                row.update(max_param_diff=param_diff, max_loss_diff=loss_diff, passed=passed, emulated=ran["emulated"],
                           **checked_class(got))
                if ran["device_count"] != row["devices"]:  # nn.DataParallel without GPUs: a pass-through
                    row["reason"] = f"ran on {ran['device_count']} device(s), not {row['devices']}"
    return rows


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("verify", help="check every strategy against single on this machine's devices")
    others = tuple(s for s in STRATEGIES if s != "single")
    parser.add_argument("--strategies", type=comma_list(str), default=others, help="default: all but single")
    parser.add_argument("--models", type=comma_list(str), default=tuple(models.FAMILIES), help="default: all")
    parser.add_argument("--devices", type=int, default=2, help="devices per strategy (default: 2)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps compared (default: 3)")
    parser.add_argument("--run-timeout-s", type=float, default=300.0, help="limit per run (default: 300)")
    parser.add_argument("--out", default="results/verify.jsonl", help="rows are appended here for the report")


def main(args: argparse.Namespace) -> int:
    try:
        for name in args.strategies:
            strategy_class(name)
        for name in args.models:
            resolve(RunConfig(model=name, preset="tiny", out=args.out))
        for flag, value in (("--devices", args.devices), ("--steps", args.steps)):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
    except ConfigError as exc:
        fail("bench verify", str(exc))
    rows = verify(args.strategies, args.models, args.devices, args.steps, args.run_timeout_s)
    print(f"{'strategy':<10} {'model':<11} {'devices':>7} {'max param diff':>15} {'max loss diff':>14}  result")
    for row in rows:
        append_record(args.out, row)
        verdict = {True: "pass", False: "FAIL", None: "skipped"}[row["passed"]]
        diff = "" if row["max_param_diff"] is None else f"{row['max_param_diff']:.2e}"
        loss = "" if row["max_loss_diff"] is None else f"{row['max_loss_diff']:.2e}"
        note = f"  ({row['reason']})" if row.get("reason") else ""
        print(f"{row['strategy']:<10} {row['model']:<11} {row['devices']:>7} {diff:>15} {loss:>14}  {verdict}{note}")
    failed = [r for r in rows if r["passed"] is False]
    return 1 if failed else 0


__all__ = ["add_parser", "main", "verify"]
