"""``python -m bench explain dp``: the PyTorch tutorial's DataParallel demonstration, made exact; ``explain pp``
draws a pipeline schedule (bench/commands/explain_pipeline.py).

The tutorial feeds a RandomDataset of 100 samples of size 5, in batches of 30, to a
``Linear(5, 2)`` wrapped in nn.DataParallel on 3 GPUs and prints each replica's input size.
This command prints the same split for any numbers, computed with the rule DataParallel
really uses (``Tensor.chunk``, see strategies/shards.py), and on a machine with enough GPUs
also runs the tutorial's model and prints the sizes the replicas saw.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from bench.harness.cli_args import fail
from strategies.shards import chunk_sizes

STEPS = (
    ("scatter", "the batch, on cuda:0, is cut along dim 0 into the chunks above; chunk i is copied to GPU i"),
    ("replicate", "the module's parameters and buffers are broadcast from cuda:0 to every GPU that got a chunk "
                  "(every step: the replicas are thrown away afterwards)"),
    ("parallel forward/backward", "one thread per GPU runs its replica's forward on its chunk; backward later "
                                  "runs through the same replicas, each on its own GPU"),
    ("gather", "the replicas' outputs are concatenated on cuda:0 (output_device), where the loss is computed "
               "over the whole batch"),
    ("reduce and update", "backward through the broadcast sums every replica's gradients into the original "
                          "parameters on cuda:0; the optimizer updates them there, once"),
)


def loader_batch_sizes(dataset_size: int, batch_size: int) -> list[int]:
    """Sizes of the batches a DataLoader gives (``drop_last=False``): 100 by 30 -> 30, 30, 30, 10."""
    full, rest = divmod(dataset_size, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


def split_lines(devices: int, batch_size: int, dataset_size: int) -> list[str]:
    """One line per batch: how nn.DataParallel scatters it over ``devices`` replicas."""
    lines = []
    for i, size in enumerate(loader_batch_sizes(dataset_size, batch_size)):
        chunks = chunk_sizes(size, devices)
        idle = f"; {devices - len(chunks)} of {devices} devices idle" if len(chunks) < devices else ""
        lines.append(
            f"  batch {i}: {size:>4} samples -> {'/'.join(map(str, chunks))}  ({len(chunks)} replicas work{idle})"
        )
    return lines


class _SizeReporter(nn.Module):
    """The tutorial's model: a Linear that notes the input size each replica receives."""

    def __init__(self, seen: list[tuple[int, tuple[int, ...]]]) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 2)
        self.seen = seen  # shared by the replicas, which copy the module's __dict__

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((x.device.index or 0, tuple(x.shape)))  # append is atomic across the replicas' threads
        return self.fc(x)


def observed_lines(devices: int, batch_size: int, dataset_size: int) -> list[str]:
    """Runs the tutorial's model under nn.DataParallel on ``devices`` GPUs; the sizes each replica saw."""
    seen: list[tuple[int, tuple[int, ...]]] = []
    model = nn.DataParallel(_SizeReporter(seen).cuda(0), device_ids=list(range(devices)))
    data = torch.randn(dataset_size, 5)
    lines = []
    for i, size in enumerate(loader_batch_sizes(dataset_size, batch_size)):
        seen.clear()
        start = i * batch_size
        out = model(data[start : start + size].cuda(0))
        inside = ", ".join(f"cuda:{d} {list(shape)}" for d, shape in sorted(seen))
        lines.append(f"  batch {i}: inside: {inside}; outside: input {[size, 5]}, output {list(out.shape)}")
    return lines


def explain_dp(devices: int, batch_size: int, dataset_size: int, gpus: int) -> list[str]:
    """The whole explanation as lines of text."""
    lines = [
        f"nn.DataParallel over {devices} device(s): {dataset_size} samples in batches of {batch_size}.",
        "Each batch is split by torch.nn.parallel.scatter, which calls Tensor.chunk(devices, dim=0):",
        "chunks of ceil(batch / devices), the remainder last, and no empty chunks.",
        *split_lines(devices, batch_size, dataset_size),
        "",
    ]
    if gpus >= devices:
        lines += [
            "Observed inside the replicas on this machine's GPUs:",
            *observed_lines(devices, batch_size, dataset_size),
        ]
    elif gpus == 0:
        lines.append("No GPU here: nn.DataParallel would only call the module, once, on each whole batch.")
    else:
        lines.append(f"This machine has {gpus} GPU(s), fewer than {devices}: the sizes above are not observed.")
    lines += ["", "One data-parallel step, and where each part runs:"]
    lines += [f"  {i}. {name}: {what}" for i, (name, what) in enumerate(STEPS, start=1)]
    return lines


DP_FLAGS = ("batch_size", "dataset_size")
PP_FLAGS = ("microbatches", "schedule", "stages_per_rank")


def add_explain_parser(commands: argparse._SubParsersAction) -> None:
    """Registers ``explain`` with the CLI."""
    explain = commands.add_parser("explain", help="show how a strategy splits the work, step by step")
    explain.add_argument("strategy", choices=["dp", "pp"], help="the strategy to explain")
    explain.add_argument("--devices", type=int, default=None, help="devices to split over (default: dp 3, pp 2)")
    explain.add_argument("--batch-size", type=int, default=None, help="dp: samples per batch (default: 30)")
    explain.add_argument("--dataset-size", type=int, default=None, help="dp: samples in the dataset (default: 100)")
    explain.add_argument("--microbatches", type=int, default=None, help="pp: micro-batches per step (default: 4)")
    explain.add_argument("--schedule", default=None, help="pp: the schedule, as bench run takes it (default: gpipe)")
    explain.add_argument("--stages-per-rank", type=int, default=None,
                         help="pp: stages per rank (default: the schedule's fewest)")


def cmd_explain(args: argparse.Namespace) -> int:
    """Prints the explanation; bad numbers are one line and exit code 2."""
    own, other = (DP_FLAGS, PP_FLAGS) if args.strategy == "dp" else (PP_FLAGS, DP_FLAGS)
    for name in other:
        if getattr(args, name) is not None:
            fail("bench explain", f"--{name.replace('_', '-')} is not read by {args.strategy} "
                                  f"(it reads --devices, {', '.join('--' + n.replace('_', '-') for n in own)})")
    for name in ("devices", "batch_size", "dataset_size", "microbatches", "stages_per_rank"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail("bench explain", f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.strategy == "pp":
        print("\n".join(_pipeline(args.devices or 2, args.schedule or "gpipe", args.stages_per_rank,
                                   args.microbatches or 4)))
        return 0
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print("\n".join(explain_dp(args.devices or 3, args.batch_size or 30, args.dataset_size or 100, gpus)))
    return 0


def _pipeline(ranks: int, schedule: str, stages_per_rank: int | None, microbatches: int) -> list[str]:
    """``explain pp``'s lines, after the checks ``bench run`` makes of the same numbers (one line, exit 2)."""
    from bench.commands.explain_pipeline import explain_pipeline
    from strategies.schedules import available_schedules, check_schedule, schedule_info

    try:
        info = schedule_info(schedule, available_schedules())
        v = info.min_v if stages_per_rank is None else stages_per_rank
        check_schedule(info, ranks, v, microbatches)
    except ValueError as exc:
        fail("bench explain", str(exc))
    return explain_pipeline(info, ranks, v, microbatches)
