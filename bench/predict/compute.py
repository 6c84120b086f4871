"""Measuring a model's compute, block by block, and its plain training step (how much a process slows when others
compute beside it: bench/predict/core_sharing.py).

Each block is timed on its own: its real input at the batch size (made by running the blocks before it once), a
forward, then a backward from a random output gradient (the loss's, for the last). So a strategy that splits the
model anywhere finds its parts' costs here, at any micro-batch size the sweep uses (a line in the batch size fits
the sizes measured).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Callable, Sequence

import torch

from bench.harness.ranks import torch_threads
from bench.predict.backward_split import split_backward_ms, takes_gradient
from bench.predict.calibration import BlockCost, ComputeCosts, Line
from models.sizes import output_bytes_per_sample, parameter_counts, saved_bytes_per_sample, tensor_counts
from models.spec import ModelSpec
from strategies.devices import synchronized_clock

log = logging.getLogger(__name__)


def block_times_ms(spec: ModelSpec, batch: int, device: torch.device, repeats: int) -> list[tuple[float, float]]:
    """Per block, (forward ms, backward ms) at ``batch`` samples: medians over ``repeats`` after one warm-up.

    Each repeat is a whole pass, timed block by block, as a pipeline stage or mp runs its blocks: every block's
    forward in order, then every block's backward in reverse order from the gradient the block after it sent back
    (each block on a detached copy of its input), into the gradients the passes before left (micro-batches
    accumulate). Timing one block over and over instead keeps its weights in the caches between its forward and
    backward, which a real pass, reading every other block's weights in between, does not."""
    now = synchronized_clock(device)
    blocks = spec.blocks.to(device)
    inputs, targets = spec.make_batch(batch, torch.Generator().manual_seed(0))
    inputs, targets = inputs.to(device), targets.to(device)
    forward: list[list[float]] = [[] for _ in blocks]
    backward: list[list[float]] = [[] for _ in blocks]
    for r in range(repeats + 1):
        block_inputs, outputs, x = [], [], inputs
        for i, block in enumerate(blocks):
            x = x.detach().requires_grad_(takes_gradient(i, x))
            start = now()
            out = block(x)
            if i == len(blocks) - 1:
                out = spec.loss_fn(out, targets)
            end = now()
            block_inputs.append(x)
            outputs.append(out)
            if r > 0:  # the first pass runs cold (allocations, kernel selection)
                forward[i].append((end - start) * 1e3)
            x = out
        gradient = None
        for i in reversed(range(len(blocks))):
            start = now()
            outputs[i].backward(gradient)
            end = now()
            if r > 0:
                backward[i].append((end - start) * 1e3)
            gradient = block_inputs[i].grad
    blocks.zero_grad(set_to_none=True)
    return [(statistics.median(f), statistics.median(b)) for f, b in zip(forward, backward, strict=True)]


def optimizer_ms_per_parameter(spec: ModelSpec, build: Callable, device: torch.device, repeats: int) -> float:
    """The optimizer step's median time over the model's parameter count (gradients present, state made)."""
    now = synchronized_clock(device)
    params = list(spec.blocks.to(device).parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer = build(params)
    optimizer.step()  # makes the state: the timed steps update it, as every step after the first does
    steps = []
    for _ in range(repeats):
        start = now()
        optimizer.step()
        steps.append((now() - start) * 1e3)
    return statistics.median(steps) / max(1, sum(p.numel() for p in params))


def plain_step_ms(costs: ComputeCosts, batch: int) -> float:
    """A plain training step at ``batch`` samples as ``costs`` puts it together: every block's forward and
    backward, the update, and the step's own overhead (which its whole steps' median fitted at each timed batch)."""
    passes = sum(b.forward_ms.at(batch) + b.backward_ms.at(batch) for b in costs.blocks)
    update = costs.optimizer_ms_per_parameter * sum(b.parameters for b in costs.blocks)
    return passes + update + costs.step_overhead_ms.signed_at(batch)


def timed_batches(costs: ComputeCosts) -> list[int]:
    """The batches ``compute_costs`` timed the blocks at: those of the ones asked where the model trains."""
    return [int(n) for n, _ in costs.blocks[0].forward_ms.points]


def compute_costs_on(threads: int, make_spec: Callable[[], ModelSpec], batches: Sequence[int],
                     build_optimizer: Callable, device: torch.device, repeats: int) -> ComputeCosts:
    """``compute_costs`` on ``threads`` threads: calibration runs it in a process forked from the fork server, as
    the runs' processes are. Timed in the calibrating process instead (a sweep's, which had built and run much
    before), the small mlp's plain step at 64 samples on 2 threads came out 7-13% above its canary and the
    runs in two main jobs (25.2 and 25.5 ms against 22.0-22.9)."""
    with torch_threads(threads):
        return compute_costs(make_spec, batches, build_optimizer, device, repeats)


def compute_costs(
    make_spec: Callable[[], ModelSpec], batches: Sequence[int], build_optimizer: Callable, device: torch.device,
    repeats: int,
) -> ComputeCosts:
    """Every block's forward and backward as lines over ``batches``, and the optimizer's per-parameter time."""
    spec = make_spec()
    per_batch = {}
    for n in batches:
        try:
            per_batch[n] = block_times_ms(spec, n, device, repeats)
        except ValueError as exc:  # BatchNorm training on one value per channel: the cnn's last block at batch 1
            log.warning("the blocks are not timed at batch %d, where the model cannot train: %s", n, exc)
    if not per_batch:
        raise ValueError(f"the model trains at none of the batches calibration times ({', '.join(map(str, batches))})")
    batches = list(per_batch)  # no run trains where the model cannot: the lines are fitted over the others
    split = {n: split_backward_ms(spec, n, device, repeats) for n in batches}

    def split_line(i: int, part: int) -> Line | None:
        measured = [(float(n), times[i][part]) for n, times in split.items() if times is not None]
        return Line.fit(measured) if len(measured) == len(batches) else None

    with torch.device("meta"):
        meta = make_spec()
    saved = saved_bytes_per_sample(meta)
    counts, tensors = parameter_counts(spec.blocks), tensor_counts(spec.blocks)
    outputs = output_bytes_per_sample(meta)
    blocks = [
        BlockCost(Line.fit([(n, per_batch[n][i][0]) for n in batches]),
                  Line.fit([(n, per_batch[n][i][1]) for n in batches]), counts[i], outputs[i], saved[i], tensors[i],
                  split_line(i, 0), split_line(i, 1))
        for i in range(len(spec.blocks))
    ]
    per_parameter = optimizer_ms_per_parameter(spec, build_optimizer, device, repeats)
    update = per_parameter * sum(counts)
    steps = {n: steady_step_ms(spec, n, build_optimizer, device, repeats) for n in batches}
    overhead: list[tuple[float, float]] = [
        (n, statistics.median(steps[n]) - update - sum(f + b for f, b in per_batch[n])) for n in batches]
    spread = max(half_range(times) for times in steps.values())
    return ComputeCosts(blocks, per_parameter, Line.fit(overhead), copy_ms_per_byte(device, repeats), spread)


def quicker(first: ComputeCosts, again: ComputeCosts) -> ComputeCosts:
    """``first`` with each block's times at each batch (forward, backward and its split) the quicker of its two
    timings, ``again`` taken minutes later, and the plain step the quicker of its two, its overhead what that step
    spends beyond the blocks and the update. The VM's cores slow the weight-heavy blocks for minutes at a time and
    noise only adds time: the small cnn's second 512-channel block took 13.66 ms a backward at 8 samples on one
    thread in a target sweep's calibration, 8.0-8.3 forty minutes later along the same path; `bench calibrate`'s
    read 8.68, then 10.01 three minutes later, while its runs' stages met the quicker."""

    def lower(mine: Line, theirs: Line) -> Line:
        other = dict(theirs.points)
        return Line.fit([(n, min(ms, other.get(n, ms))) for n, ms in mine.points])

    def lower_split(mine: Line | None, theirs: Line | None) -> Line | None:  # None where not measured
        return lower(mine, theirs) if mine is not None and theirs is not None else mine

    blocks = [dataclasses.replace(a, forward_ms=lower(a.forward_ms, b.forward_ms),
                                  backward_ms=lower(a.backward_ms, b.backward_ms),
                                  backward_input_ms=lower_split(a.backward_input_ms, b.backward_input_ms),
                                  backward_weight_ms=lower_split(a.backward_weight_ms, b.backward_weight_ms))
              for a, b in zip(first.blocks, again.blocks, strict=True)]
    update = first.optimizer_ms_per_parameter * sum(b.parameters for b in blocks)
    overhead = [(n, min(plain_step_ms(first, int(n)), plain_step_ms(again, int(n))) - update
                 - sum(b.forward_ms.at(n) + b.backward_ms.at(n) for b in blocks))
                for n, _ in first.step_overhead_ms.points]
    return dataclasses.replace(first, blocks=blocks, step_overhead_ms=Line.fit(overhead) if overhead
                               else first.step_overhead_ms)


def reconciled(costs: ComputeCosts) -> ComputeCosts:
    """``costs`` with the blocks at each timed batch scaled down to the plain step that runs them all, where they
    summed past it (less the update) by more than that step's own spread; its overhead there is then none.

    A whole pass holds every block's forward and backward: timed apart, they summed past it where a slow spell
    took the blocks and not the steps, or where each block's own autograd call cost more than its part of one. The
    seventeenth target sweep's one-thread cnn blocks summed 49.7 ms at 4 samples against a plain step of 39.2 less
    its update (spread 7.5%), and the pipelines that ran those blocks spent 0.75-0.95 of the time predicted for
    their actions. Re-fitted on the records of 17 target sweeps, this put 164 configurations past 15% where 192
    were (docs/predictor.md, "Blocks no slower than the step that runs them")."""
    scale = {}
    for n, beyond in costs.step_overhead_ms.points:
        summed = sum(b.forward_ms.at(n) + b.backward_ms.at(n) for b in costs.blocks)
        if summed > 0 and -beyond > costs.spread * summed:
            scale[n] = (summed + beyond) / summed
            log.info("the blocks at batch %g summed %.1f ms, %.0f%% past the plain step less its update: scaled to it",
                     n, summed, -100 * beyond / summed)
    if not scale:
        return costs

    def scaled(line: Line) -> Line:
        return Line.fit([(n, ms * scale.get(n, 1.0)) for n, ms in line.points])

    def scaled_split(line: Line | None) -> Line | None:
        return None if line is None else scaled(line)

    blocks = [dataclasses.replace(b, forward_ms=scaled(b.forward_ms), backward_ms=scaled(b.backward_ms),
                                  backward_input_ms=scaled_split(b.backward_input_ms),
                                  backward_weight_ms=scaled_split(b.backward_weight_ms)) for b in costs.blocks]
    overhead = Line.fit([(n, 0.0 if n in scale else ms) for n, ms in costs.step_overhead_ms.points])
    return dataclasses.replace(costs, blocks=blocks, step_overhead_ms=overhead)


STEP_SPREAD_LIMIT, STEP_TRIES = 0.5, 3
"""A batch's plain-step repeats straying past this half-range are timed again, this many tries in all: the nine
calibrations of the three target sweeps strayed 24% at most; a main job's read 328% (batch 16, 2 threads), its median
16 ms above its blocks', and mp (that micro-batch) came out +164%."""


def steady_step_ms(spec: ModelSpec, batch: int, build: Callable, device: torch.device, repeats: int,
                   timed: Callable[..., list[float]] | None = None) -> list[float]:
    """``whole_step_ms``'s repeats, timed again while they stray past ``STEP_SPREAD_LIMIT`` (other work took the
    cores for part of them); the try that strays least is kept, with a warning where even it strays past it."""
    time_it = timed or whole_step_ms
    tries = [time_it(spec, batch, build, device, repeats)]
    while half_range(tries[-1]) > STEP_SPREAD_LIMIT and len(tries) < STEP_TRIES:
        log.warning("the plain step at batch %d strayed %.0f%% over its repeats (try %d of %d): timing it again",
                    batch, 100 * half_range(tries[-1]), len(tries), STEP_TRIES)
        tries.append(time_it(spec, batch, build, device, repeats))
    if half_range(steadiest := min(tries, key=half_range)) > STEP_SPREAD_LIMIT:
        log.warning("the plain step at batch %d strayed %.0f%% over its repeats in every try; its steadiest is kept",
                    batch, 100 * half_range(steadiest))
    return steadiest


def half_range(values: Sequence[float]) -> float:
    """Half the range of ``values`` over their median: how far a calibration's own repeats stray."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / 2 / middle if middle else 0.0


COPY_BYTES = 32 * 2**20


def copy_ms_per_byte(device: torch.device, repeats: int) -> float:
    """The median time of copying 32 MiB between two tensors, per byte."""
    now = synchronized_clock(device)
    source = torch.ones(COPY_BYTES // 4, device=device)
    target = torch.empty_like(source)
    times = []
    for r in range(repeats + 1):
        start = now()
        target.copy_(source)
        if r > 0:
            times.append((now() - start) * 1e3)
    return statistics.median(times) / COPY_BYTES


def whole_step_ms(spec: ModelSpec, batch: int, build: Callable, device: torch.device, repeats: int) -> list[float]:
    """The timed repeats of a plain training step (the PyTorch tutorials' loop) at ``batch`` samples."""
    now = synchronized_clock(device)
    blocks = spec.blocks.to(device)
    optimizer = build(blocks.parameters())
    inputs, targets = spec.make_batch(batch, torch.Generator().manual_seed(0))
    inputs, targets = inputs.to(device), targets.to(device)
    steps = []
    for r in range(repeats + 1):
        start = now()
        optimizer.zero_grad(set_to_none=True)
        spec.loss_fn(blocks(inputs), targets).backward()
        optimizer.step()
        if r > 0:
            steps.append((now() - start) * 1e3)
    return steps


class Disturbed(RuntimeError):
    """Other processes kept the machine busy through every try of a measurement."""
