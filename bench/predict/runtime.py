"""What the distributed runtimes cost beyond compute and the bytes they move, measured on the model calibrated.

Hooks, bucketing, DTensor dispatch, a pipeline schedule's bookkeeping per action: none of it is in a block's
compute or a collective's curve, and on small models it is most of a step (a 2-rank pp step of the tiny mlp
idles most of its time between actions). So calibration runs each strategy whose cost model names a
``residual`` (``ddp``, ``zero1``, ``fsdp``, ``tp``, ``pp``, on 4 ranks or more ``hybrid`` dp x pp) on the
model being calibrated, on N processes, at two global batches the sweep does not use (a small one, and one
half again the calibrated batch: ``reference_global_batches``), and keeps what each step took beyond what its
cost model predicts for that very run with no runtime cost, in the unit it grows with: per step (ddp; zero1
beyond ddp), per block (fsdp), per parallelized layer (tp), per schedule action (pp), per step beyond pp's
(hybrid); and, where the reference run measures its bubble (pp), how much of it is spent between the actions
rather than in them (``idle_gap``). Each device count is measured on that many processes: on
shared cores 4 ranks wait for each other far longer than 2 do. ``mp`` runs in one process, so its reference
run is timed in the calibrating process itself, per micro-batch, at each device count (its stages): a tiny
model's micro-batch can spend as long handing over between stages and in the step's bookkeeping as in its
blocks (on the 2-core VM: 0 at 2 stages, 0.2-0.4 ms at 4 for the tiny mlp and transformer).

Each term is the line through its two batches, unclamped (a term below zero where the cost model, not the
runtime, overcounts): from one small batch alone, tp's per-layer term came out the same at every batch and tp
on the small mlp at 64 samples was predicted 15-28% short in four main jobs, the copies and reshapes around
DTensor's layers growing with the batch.

The runtimes' cost is the model's own: one reference model for all (the tiny mlp, 2 parameter tensors
per block) left the transformer (16 per block, attention's DTensor views) 20-45% slower under ddp, fsdp,
zero1 and tp than predicted on the 2-core VM.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

import models
from bench.harness.config import RunConfig, resolve
from bench.harness.disturbance import Verdict
from bench.harness.ranks import like_a_run, torch_threads
from bench.predict.calibration import Calibration
from bench.predict.costs import cost_model, optimizer_states, predict_step, predicted_strategies
from bench.predict.reference_names import in_process, strategy_of, threads_of, variant_name
from bench.predict.scenario import Scenario, scenario_for
from strategies import REFERENCE, ConfigError, strategy_class
from strategies.cost_model import (
    REFERENCE_MICROBATCHES,
    CostModel,
    RuntimeOverheads,
    StepPrediction,
    threads_per_process,
)
from strategies.mesh import DIMS

REFERENCE_STEPS = 16
"""Timed steps per reference run at the small batch in each group. Their steps take milliseconds, and the
median of 8 left zero1's residual on 2 processes anywhere from 2.1 to 7.5 ms over six calibrations of the
2-core VM."""
LARGE_REFERENCE_STEPS = 8
"""At the larger batch, whose steps take tens of milliseconds on the small presets."""
LARGER = 1.5
"""The larger reference batch over the calibrated one: beyond the sweep's batch, so that its runs are held out
and between the two reference batches."""


FITTED_FIELDS = ("strategy", "model", "preset", "norm", "devices", "batch_size", "microbatches", "schedule",
                 "stages_per_rank", *DIMS, "precision", "optimizer")
"""What makes a sweep's run the same configuration as a reference run (steps and repeats aside)."""


def fitted_key(config: RunConfig) -> str:
    """The name of ``config``'s configuration among the runs a calibration was fitted on; ``norm`` only for
    a model it changes (`bench calibrate` defaults to group, a sweep to batch: the mlp is the same model)."""
    flags = config.as_dict()
    key = {name: flags[name] for name in FITTED_FIELDS}
    if not models.reads_norm(str(flags["model"])):
        key["norm"] = None
    return json.dumps(key, sort_keys=True)


def any_several_stages_a_rank(runs: Iterable[str]) -> bool:
    """Whether any of the runs named by ``fitted_key`` ran several stages a rank (pp's interleaved variant)."""
    return any(json.loads(run).get("stages_per_rank", 1) > 1 for run in runs)


def plain_step_configs(calibrated: RunConfig, batches: list[int]) -> list[RunConfig]:
    """``single`` on one device at each batch the calibration timed whole plain steps at: its prediction
    there is that step's own median (the step overhead is fitted through it), in-sample."""
    return [resolve(calibrated.with_flags(strategy=REFERENCE, devices=1, batch_size=n, precision="fp32",
                                          microbatches=1)) for n in batches]


def fitted(calibration: object, config: RunConfig) -> bool | None:
    """Whether ``config``'s timings entered ``calibration`` (its prediction is then not held out); None where
    the source does not say (a hardware profile, or a calibration file that predates the record)."""
    runs = getattr(calibration, "fitted_runs", None)
    return None if runs is None else fitted_key(config) in runs


PER_RANK = 4
"""Samples per rank of a reference run, doubled where that global batch is the calibrated one (below)."""


def reference_per_rank(ranks: int, calibrated_batch: int | None) -> int:
    """Samples per rank of the reference runs on ``ranks`` ranks: ``PER_RANK``, unless ``ranks * PER_RANK`` is the
    global batch calibrated for (the sweep's), where its residual would be fitted on the very runs it then
    predicts (the small transformer's 16 at 4 ranks): then twice that."""
    return 2 * PER_RANK if ranks * PER_RANK == calibrated_batch else PER_RANK


def reference_batches(ranks: int, per_rank: int = PER_RANK) -> list[int]:
    """The per-process batches the reference runs compute at (calibration times the blocks there too):
    ddp's share, pp's micro-batch, tp's whole batch."""
    return sorted({per_rank, max(1, ranks * per_rank // REFERENCE_MICROBATCHES), ranks * per_rank})


def reference_global_batches(ranks: int, calibrated_batch: int | None) -> list[int]:
    """The global batches the reference runs on ``ranks`` ranks take: ``ranks * reference_per_rank``, and the
    least multiple of ``ranks * REFERENCE_MICROBATCHES`` (every rank's share split into the pipelines'
    micro-batches) at least ``LARGER`` times the calibrated batch (4 times the small one where none is given)."""
    small = ranks * reference_per_rank(ranks, calibrated_batch)
    unit = ranks * REFERENCE_MICROBATCHES
    target = LARGER * calibrated_batch if calibrated_batch else 4 * small
    large = max(unit, -(-int(target) // unit) * unit)
    return sorted({small, large if large not in (small, calibrated_batch) else large + unit})


def reference_configs(calibrated: RunConfig, out: str, ranks: int, global_batch: int | None = None,
                      variants: bool = True) -> dict[str, RunConfig]:
    """The reference runs on ``ranks`` ranks: each strategy whose cost model fits a residual there
    (``CostModel.reference_options``), in the registry's order (zero1's residual is what it costs beyond
    ddp's, hybrid's beyond pp's), on the model and optimizer calibrated, fp32, at ``global_batch`` (None: the
    small reference batch, ``ranks * reference_per_rank``), the default options; with ``variants``, each
    strategy's variants too (``CostModel.reference_variants``: pp's interleaved)."""
    workload = calibrated.workload
    small = ranks * reference_per_rank(ranks, calibrated.run.batch_size)
    batch = global_batch or small
    base = RunConfig.from_flags(out=out, accelerator=calibrated.run.accelerator, backend=calibrated.run.backend,
                                optimizer=workload.optimizer, precision="fp32", model=workload.model,
                                preset=workload.preset, norm=workload.norm, batch_size=batch,
                                steps=REFERENCE_STEPS if batch <= small else LARGE_REFERENCE_STEPS, warmup=2,
                                devices=ranks, memory_by_kind=False)
    configs = {}
    for name in predicted_strategies():
        # flags by name, which mypy cannot match to their sections: with_flags and resolve check them
        model = cost_model(name)
        extra: dict[str, Any] | None = model.reference_options(ranks, REFERENCE_MICROBATCHES)
        if extra is None or strategy_class(name).min_devices > ranks:
            continue
        runs: dict[str, dict[str, Any]] = {name: extra, **{
            variant_name(name, variant): options
            for variant, options in (model.reference_variants(ranks, REFERENCE_MICROBATCHES) if variants
                                     else {}).items()}}
        for reference, options in runs.items():
            try:
                configs[reference] = resolve(base.with_flags(strategy=name, **options))
            except ConfigError:  # the model cannot run it (no tp plan, fewer blocks than stages): never predicted
                continue
    return configs


def residuals(calibration: Calibration, ranks: int, configs: dict[str, RunConfig],
              step_ms: dict[str, float]) -> RuntimeOverheads:
    """Each reference run's residual: the runtime term (per its unit) at which ``calibration``, with the residuals
    found so far, predicts its measured median step (``step_ms``); below zero where the cost model overcounts.
    Where the run measured its bubble too (``bubble_key``), the share of that residual spent outside the spans."""
    from bench.predict.collectives import bubble_key

    found = RuntimeOverheads()
    for name, config in configs.items():
        model, scenario = cost_model(strategy_of(name)), scenario_for(config)
        if (threads := threads_of(name)) is not None:
            scenario = dataclasses.replace(scenario, threads=threads)
        residual, idle = model.fitted_terms(scenario)
        if name not in step_ms or residual is None:
            continue
        bubble = step_ms.get(bubble_key(name)) if idle else None
        found = _fitted(calibration, ranks, found, model, scenario, optimizer_states(config.workload.optimizer),
                        step_ms[name], bubble)
    return found


def _fitted(calibration: Calibration, ranks: int, found: RuntimeOverheads, model: CostModel, scenario: Scenario,
            states: int, measured: float, bubble: float | None) -> RuntimeOverheads:
    """``found`` with ``model``'s residual, and the part of it spent between the actions where its reference run
    measured its ``bubble``."""
    fitted_term, idle_term = model.fitted_terms(scenario)
    residual_term = str(fitted_term)
    units = max(1, model.runtime_units(scenario, len(calibration.blocks(1))))

    def with_terms(residual: float, gap: float) -> RuntimeOverheads:
        idle = {idle_term: gap} if idle_term and bubble is not None else {}
        return RuntimeOverheads(found, **{residual_term: residual}, **idle)

    def predicted(residual: float, gap: float) -> StepPrediction:
        return predict_step(calibration.with_runtime(ranks, with_terms(residual, gap)), scenario, states)

    gap = 0.0
    residual = solved_residual(lambda r: predicted(r, gap).step_ms, measured, units)
    if bubble is None:
        return with_terms(residual, gap)
    for _ in range(IDLE_ROUNDS):
        # where the residual falls moves the step a little (the spans' slowdowns), so the two are fitted in turn
        gap = idle_gap(lambda g: predicted(residual, g).bubble or 0.0, bubble,  # noqa: B023 (called at once)
                       measured / units)
        residual = solved_residual(lambda r: predicted(r, gap).step_ms, measured, units, residual)  # noqa: B023
    return with_terms(residual, gap)


IDLE_ROUNDS = 3
"""Rounds of fitting a pipeline's residual and its idle share in turn: re-fitted from the two target sweeps'
calibrations (24 pp references), the second round moved one of them by up to 8%, the third by under 1%."""
SOLVE_TOLERANCE_MS = 1e-3


def solved_residual(step_at: Callable[[float], float], measured: float, units: int,
                    guess: float | None = None) -> float:
    """The residual at which ``step_at`` meets ``measured``, by the secant method from the line through no residual
    and ``units`` of it.

    One step of that line (the residual taken as adding ``units`` times itself) left the pipelines' reference runs
    predicted 2-4% short of themselves at 4 ranks on the 2-core VM: a residual lengthens the actions, which changes
    how many ranks compute side by side and so their slowdowns. Where the step stops answering (held at its compute
    and update: ``predict_step``), the nearest found is kept."""
    previous, previous_miss = 0.0, step_at(0.0) - measured
    current = guess if guess is not None else -previous_miss / units
    miss = step_at(current) - measured
    best = min((previous, previous_miss), (current, miss), key=lambda point: abs(point[1]))
    for _ in range(20):
        if abs(best[1]) <= SOLVE_TOLERANCE_MS or miss == previous_miss:
            break
        previous, previous_miss, current = current, miss, current - miss * (current - previous) / (miss - previous_miss)
        miss = step_at(current) - measured
        best = min(best, (current, miss), key=lambda point: abs(point[1]))
    return best[0]


def reference_step_ms(config: RunConfig, threads: int | None = None) -> tuple[float, Verdict]:
    """``collectives.undisturbed_step_ms`` of a one-process reference run, on ``threads`` threads (None: every
    core), judged from here on."""
    from bench.harness.disturbance import open_window
    from bench.predict.collectives import undisturbed_step_ms

    with torch_threads(threads or threads_per_process(1)):
        open_window()
        return undisturbed_step_ms(config)


def idle_gap(bubble_at: Callable[[float], float], measured: float, most: float, steps: int = 30) -> float:
    """The milliseconds per action (0 to ``most``) spent between the spans at which the predicted bubble
    (``bubble_at(gap)``, growing with it) meets the ``measured`` one; the nearer end where none does.

    A pipeline's per-action residual is partly its actions running slower (or quicker) than their blocks timed
    alone (inside the spans a measured timeline times) and partly the schedule's work between them (in the
    measured bubble). Fitted as a share of the residual (0 to 1), the mlp's and transformer's came out 85-100% on
    the 2-core VM, but the small cnn's residual at 2 ranks was below zero (-0.09 ms: in the fifth target sweep's
    timelines its backwards ran a median 0.3-0.8 ms quicker than timed alone, its forwards -0.2 to +0.3 ms
    slower) and left no gap at all; its interleaved-1f1b at 2 ranks came out 19.3% and 19.5% short in the
    last two target sweeps. The gap is its own term since."""
    low, high = 0.0, max(0.0, most)
    if bubble_at(low) >= measured:
        return low
    if bubble_at(high) <= measured:
        return high
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (middle, high) if bubble_at(middle) < measured else (low, middle)
    return (low + high) / 2


def in_process_step_ms(configs: dict[str, RunConfig]) -> dict[str, float]:
    """The median step of each reference run of one process (``in_process``), run where a run's process would
    run it (``ranks.like_a_run``: forked, on a CPU) with every core (as a sweep's one-process run is), judged and
    run again as the ranks' reference runs are (``collectives.undisturbed_step_ms``), but refused where every try
    was disturbed: there is no median over groups to outvote it, and mp's residual on the small cnn at 4 stages
    came out 133 ms a micro-batch from a reference run taken beside a test run, and every mp prediction of that
    model followed it (+160% and +180%)."""
    from bench.predict.collectives import REFERENCE_TRIES
    from bench.predict.compute import Disturbed

    step_ms = {}
    for name, config in configs.items():
        if not in_process(config.strategy):
            continue
        step_ms[name], verdict = like_a_run(config.run.accelerator, reference_step_ms, config, threads_of(name))
        if verdict.disturbed:
            raise Disturbed(f"{name}'s reference run was disturbed in {REFERENCE_TRIES} tries ({verdict.reason}); "
                            "calibrate on a quiet machine")
    return step_ms
