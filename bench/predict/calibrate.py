"""``bench calibrate``'s measurement: compute at every thread count and batch a sweep needs, and on N processes
the collectives, the runtimes' residuals and the shared cores' slowdown, as one ``Calibration``."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from tqdm import tqdm

import models
from bench.harness.config import RunConfig, unread_groups_reset
from bench.harness.environment import environment
from bench.harness.launch import threads_per_process
from bench.harness.ranks import like_a_run
from bench.harness.runner import optimizer_choice
from bench.predict.calibration import Calibration, Canary, ComputeCosts
from bench.predict.canary import DRIFT_LIMIT, canary_layout, canary_ms
from bench.predict.collectives import GROUPS, default_sizes, measure_collectives
from bench.predict.communication import Communication
from bench.predict.compute import compute_costs_on, plain_step_ms, quicker, reconciled, timed_batches
from bench.predict.core_sharing import slowdown
from bench.predict.costs import cost_model, predicted_strategies
from bench.predict.reference_names import in_process, rank_threads, threads_of, with_thread_variants
from bench.predict.reference_speed import StepSpeed, at_calibration_speed, timed_between
from bench.predict.runtime import (
    fitted_key,
    in_process_step_ms,
    plain_step_configs,
    reference_batches,
    reference_configs,
    reference_global_batches,
    residuals,
)
from models.spec import ModelSpec
from strategies import REFERENCE
from strategies.cost_model import Scenario

MACHINE_KEYS = ("hostname", "torch", "gpu_names", "cpu_model", "cpu_cores")
"""What a calibration must share with the machine it predicts for."""

log = logging.getLogger(__name__)
T = TypeVar("T")


def machine_identity(env: dict[str, object]) -> dict[str, object]:
    return {key: env.get(key) for key in MACHINE_KEYS}


def calibration_batches(batch: int, devices: tuple[int, ...], microbatches: tuple[int, ...]) -> list[int]:
    """The per-process batch sizes the blocks are timed at: every device count's whole share (data
    parallelism runs one micro-batch whatever --microbatches says) and its micro-batches (pipelines)."""
    return sorted({max(1, batch // (d * m)) for d in (1, *devices) for m in (1, *microbatches)})


def slowdown_counts(parallel: list[int], cores: int) -> list[int]:
    """The process counts whose slowdown a CPU calibration measures: each of its device counts beyond one, and the
    cores' where one goes beyond them, which a pipeline's ranks beyond the cores take turns at
    (``Calibration.action_slowdown``: read straight between 1 and 4 processes, a 4-device sweep's 2-process slowdown
    came out 1.69, where the target sweeps' 63 calibrations measured 1.00-1.13)."""
    return sorted({*parallel, cores} if 1 < cores < max(parallel, default=0) else set(parallel))


def calibrate(config: RunConfig, devices: tuple[int, ...], microbatches: tuple[int, ...], largest: int,
              repeats: int, groups: int = GROUPS, variants: bool = True) -> Calibration:
    """Measures compute at every thread count and batch the devices and micro-batches need, and at every
    device count beyond one the collectives, the runtimes' residuals and the slowdown of processes
    computing together. ``config`` is resolved (its batch size filled in); its strategy's options are not
    read (a sweep hands in its model's first run, a hybrid mesh's perhaps). Without ``variants``, no reference
    run of a strategy's variants (pp's interleaved: a sweep of no schedule of several stages a rank needs none)."""
    config = unread_groups_reset(config.with_flags(strategy=REFERENCE))
    assert config.run.batch_size is not None, "calibrate takes a resolved RunConfig"
    make_spec = functools.partial(models.build_model, config.workload.model, config.workload.preset,
                                  config.workload.norm)
    parallel = sorted(d for d in set(devices) if d > 1)
    at_references = itertools.chain(*(reference_batches(d, n // d) for d in parallel
                                      for n in reference_global_batches(d, config.run.batch_size)))
    batches = sorted({*calibration_batches(config.run.batch_size, devices, microbatches), *at_references})
    cuda = config.run.accelerator == "cuda"
    calibration_arithmetic(config.run.precision)
    # A GPU's compute does not depend on the host threads; a CPU process's does, on its share of the cores.
    threads = sorted({threads_per_process(d) for d in (1, *(() if cuda else devices))})
    device = torch.device("cuda" if cuda else "cpu")
    canaries_before = _canaries(config, make_spec, devices, microbatches, device)
    costs = {}
    counts = parallel if cuda else slowdown_counts(parallel, os.cpu_count() or 1)  # the cores the ranks share
    steps = tqdm(total=len(threads) * (1 if cuda else 2) + len(counts) + 1, desc="calibrate", unit="step")
    for t in threads:
        measure = functools.partial(like_a_run, config.run.accelerator, compute_costs_on, t, make_spec, batches,
                                    optimizer_choice(config).build, device, repeats)
        mine = tuple(c for c in canaries_before if c.threads == t)
        retime = functools.partial(_retimed, make_spec, optimizer_choice(config).build, device, mine)
        costs[t], timed = steady_compute(measure, mine, retime)
        canaries_before = tuple(sorted((*(c for c in canaries_before if c.threads != t), *timed),
                                       key=lambda c: (c.threads, c.batch)))
        batches = timed_batches(costs[t])  # a batch the model cannot train at is tried, and warned of, once
        steps.update()
    # One GPU cannot host two NCCL ranks: with fewer than 2, nothing that communicates is predicted.
    ranks = [d for d in parallel if not cuda or d <= torch.cuda.device_count()]
    communication, slow, references, speeds = {}, {}, {}, {}
    # each step of reference runs between canaries of its layouts (a rank's threads, and every core for mp's one
    # process), at the largest batch each was timed at before the compute (bench/predict/reference_speed.py)
    layouts = {c.threads: c for c in sorted(canaries_before, key=lambda c: c.batch)}

    def on_ranks(d: int) -> None:
        threads = {threads_per_process(1), threads_per_process(d)}
        probe = functools.partial(_probe, make_spec, optimizer_choice(config).build, device,
                                  tuple(c for t, c in layouts.items() if t in threads))
        (communication[d], references[d]), speeds[d] = timed_between(
            functools.partial(_communication, config, d, largest, groups, variants), probe,
            f"the reference runs on {d} rank(s)")

    # ddp on one device runs its reducer with no peer: its runtime is its own, not the one 2 processes fitted
    # (the small mlp's ddp on 1 device came out 12-21% short in two main jobs from theirs). Not on a GPU yet:
    # 3 groups of a CUDA process each, untimed against bench/gpu_check.sh's budget.
    if not cuda:
        on_ranks(1)
    steps.update()
    for d in counts:
        slow[d] = 1.0 if cuda else slowdown(make_spec, max(1, config.run.batch_size // d), d, threads_per_process(d),
                                            seconds=SLOWDOWN_SECONDS)
        if d in ranks:
            on_ranks(d)
        steps.update()
    # Each thread count's compute timed again, minutes after the first, each time the quicker of the two (``quicker``)
    for t in threads if not cuda else ():
        costs[t] = quicker(costs[t], like_a_run(config.run.accelerator, compute_costs_on, t, make_spec,
                                                timed_batches(costs[t]), optimizer_choice(config).build, device,
                                                repeats))
        steps.update()
    steps.close()
    costs = {t: reconciled(c) for t, c in costs.items()}  # blocks no slower than the step that runs them all
    env = environment()
    calibration = Calibration(config.workload.model, config.workload.preset, config.workload.norm, "fp32",
                              config.run.accelerator, config.run.backend,
                              machine_identity(env), costs, communication, slow, env)
    # The runtimes' residuals: what the cost models, with everything else measured, miss on the reference runs,
    # at each of their batches, and the line through them.
    for d, by_batch in references.items():
        calibration = calibration.with_runtime_line(d, {
            n: residuals(calibration, d, configs, at_calibration_speed(step_ms, _drift_of(configs, d, speeds[d],
                                                                                          layouts)))
            for n, (configs, step_ms) in by_batch.items()})
    for name in predicted_strategies():
        model = cost_model(name)
        if model.residual and model.across_ranks_units:
            # each thread count's own term where its reference runs fitted one (mp's at a rank's share of the cores)
            terms = {model.fitted_terms(Scenario(name, 2, 1, threads=rank_threads(config.run.accelerator, d)))[0]
                     for d in (1, *ranks)}
            for term in sorted(t for t in terms if t):
                calibration = calibration.with_across_ranks(term, model.across_ranks_units)
    fitted_runs = tuple(fitted_key(c) for by_batch in references.values() for configs, _ in by_batch.values()
                        for c in configs.values())
    fitted_runs += tuple(fitted_key(c) for c in plain_step_configs(config, batches))
    for first, after in zip(canaries_before, _canaries(config, make_spec, devices, microbatches, device),
                            strict=True):
        if abs(after.ms / first.ms - 1) > DRIFT_LIMIT:
            log.warning("the canary step of %d thread(s) at batch %d took %.2f ms before the calibration and %.2f "
                        "ms after it: the machine's speed moved while it was measured", first.threads,
                        first.batch, first.ms, after.ms)
    # the canaries from before: the compute the predictions rest on was timed right after them
    reference_drift = {d: {t: drift for t, c in layouts.items() if (drift := speed.drift(t, c.ms)) is not None}
                       for d, speed in speeds.items()}
    return dataclasses.replace(calibration, fitted_runs=fitted_runs, global_batch=config.run.batch_size,
                               canaries=canaries_before, reference_drift=reference_drift)


def _probe(make_spec: Callable[[], ModelSpec], build_optimizer: Callable, device: torch.device,
           layouts: tuple[Canary, ...]) -> dict[int, float]:
    return {c.threads: c.ms for c in _retimed(make_spec, build_optimizer, device, layouts)}


def _drift_of(configs: dict[str, RunConfig], ranks: int, speed: StepSpeed,
              layouts: dict[int, Canary]) -> Callable[[str], float | None]:
    """The drift of a reference run's layout, by its name: mp's one process has every core, a rank its share."""
    def drift(name: str) -> float | None:
        config = configs.get(name.partition(":")[0])
        threads = threads_of(name) or threads_per_process(1 if config is None or in_process(config.strategy) else ranks)
        return speed.drift(threads, layouts[threads].ms) if threads in layouts else None
    return drift


SLOWDOWN_SECONDS = 1.0
"""How long each side of a slowdown's pairs computes (``core_sharing.slowdown``). Five slowdowns of the small
mlp's 2 one-thread processes at batch 32 side by side on the 2-core VM: 1.026-1.083 (median 1.066) with 1 s,
1.013-1.065 (median 1.054) with 2 s, which took 13 s of a calibration where 1 s took 7."""


COMPUTE_TRIES = 3
"""Measurements of the compute at one thread count, at most, before the one nearest its canary is kept."""


def steady_compute(measure: Callable[[], ComputeCosts], canaries: tuple[Canary, ...],
                   retime: Callable[[], tuple[Canary, ...]] | None = None,
                   tries: int = COMPUTE_TRIES) -> tuple[ComputeCosts, tuple[Canary, ...]]:
    """The compute ``measure`` times, measured again while its plain step at the largest batch of ``canaries``
    (one thread count's) came out more than ``DRIFT_LIMIT`` off that canary, timed just before (the same step,
    the quickest of 3): other work, or the machine's speed, moved between them. Each try after the first times
    its canaries again first (``retime``): either side may be the one disturbed. Of the tries, the pair nearest.

    In a main job on the 2-core VM the 2-thread compute put the small mlp's plain step at batch 64 at 25.5 ms
    where its canary had read 22.1 seconds before and the sweep's runs then measured 22.4-22.9: single,
    whose prediction is that step, 12.6% over, and every one-process prediction with it. Run again, the same
    measurement came out within 2-3% of its canary (20.8-21.3 ms against 20.5-20.8). In a target sweep the
    other way round: the small mlp's one-thread canary at batch 32 read 43.67 ms, its compute three times 18-30%
    quicker, and the same canary 29.45 ms at the calibration's end; every run's drift is read against it."""
    tried: list[tuple[float, ComputeCosts, tuple[Canary, ...]]] = []
    for attempt in range(tries):
        if attempt and retime is not None:
            canaries = retime()
        costs = measure()
        canary = max(canaries, key=lambda c: c.batch, default=None)
        if canary is None or canary.batch not in timed_batches(costs):
            return costs, canaries
        off = plain_step_ms(costs, canary.batch) / canary.ms - 1
        tried.append((abs(off), costs, canaries))
        if abs(off) <= DRIFT_LIMIT:
            break
        log.warning("the plain step at batch %d came out %+.0f%% off its canary (%.2f ms) on %d thread(s) "
                    "(try %d of %d)%s", canary.batch, 100 * off, canary.ms, canary.threads, attempt + 1, tries,
                    ": timing both again" if attempt + 1 < tries else ": keeping the nearest pair")
    _, costs, canaries = min(tried, key=lambda t: t[0])
    return costs, canaries


def _retimed(make_spec: Callable[[], ModelSpec], build_optimizer: Callable, device: torch.device,
             canaries: tuple[Canary, ...]) -> tuple[Canary, ...]:
    return tuple(Canary(c.threads, c.batch, canary_ms(make_spec, c.batch, c.threads, build_optimizer, device))
                 for c in canaries)


def _canaries(config: RunConfig, make_spec: Callable[[], ModelSpec], devices: tuple[int, ...],
              microbatches: tuple[int, ...], device: torch.device) -> tuple[Canary, ...]:
    """The canary of every layout a run of ``devices`` and ``microbatches`` takes: one process (single, mp, one
    device) or as many as its devices, each with its share of the cores, stepping its share of the global batch
    whole or in micro-batches (``canary_layout``)."""
    assert config.run.batch_size is not None, "calibrate takes a resolved RunConfig"
    build = optimizer_choice(config).build
    layouts = sorted({canary_layout(config.run.batch_size, p, m) for p in {1, *devices} for m in {1, *microbatches}})
    canaries = []
    for threads, batch in layouts:
        try:
            canaries.append(Canary(threads, batch, canary_ms(make_spec, batch, threads, build, device)))
        except ValueError as exc:  # BatchNorm training on one value per channel: the cnn at 1 sample (4 x 8 of 32)
            log.warning("no canary at batch %d, where the model cannot train: %s", batch, exc)
    return tuple(canaries)


def _at_batch(named: dict[str, T], batch: int) -> dict[str, T]:
    """The entries of ``named`` (``strategy@batch``, a bubble's ``strategy@batch:bubble``) at ``batch``, by
    strategy (and ``strategy:bubble``)."""
    out = {}
    for name, value in named.items():
        strategy, _, rest = name.partition("@")
        at, colon, suffix = rest.partition(":")
        if at == str(batch):
            out[strategy + colon + suffix] = value
    return out


def calibration_arithmetic(precision: str) -> None:
    """Sets TF32 as a run of ``precision`` does (strategies/precision.py): left at torch's default, cuDNN
    would time an fp32 calibration's convolutions in TF32 while fp32 runs compute them in full fp32."""
    from strategies.precision import set_tf32

    set_tf32(precision)


def _communication(config: RunConfig, ranks: int, largest: int, groups: int, variants: bool) -> tuple[
        Communication, dict[int, tuple[dict[str, RunConfig], dict[str, float]]]]:
    """The collectives and the overlap measured on ``ranks`` processes (the runtimes' residuals not yet
    known), and by global batch the reference runs there (mp's in a process of its own) with their median
    steps (and bubbles), by strategy. Measured together, named ``strategy@batch``."""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "reference.jsonl")
        references = {f"{name}@{n}": c for n in reference_global_batches(ranks, config.run.batch_size)
                      for name, c in reference_configs(config, out, ranks, n, variants).items()}
        references = with_thread_variants(references, ranks)  # mp at a rank's share of the cores too
        on_ranks = {name: c for name, c in references.items() if not in_process(c.strategy)}
        curves, reference_ms = measure_collectives(ranks, config.run.accelerator, default_sizes(largest),
                                                   references=on_ranks, groups=groups)
        reference_ms |= in_process_step_ms(references)
    overlap, spread = reference_ms.pop("overlap", 1.0), reference_ms.pop("spread")
    by_batch = {n: (_at_batch(references, n), _at_batch(reference_ms, n))
                for n in reference_global_batches(ranks, config.run.batch_size)}
    return Communication(curves, overlap=overlap, spread=spread), by_batch


