"""A prediction as a record of kind ``prediction``: every figure named predicted, with its interval (the
calibration's own spread, widened by a sweep's held-out errors: bench/predict/conformal.py) and whether its
run's timings entered the calibration (``fitted``)."""

from __future__ import annotations

import dataclasses
import datetime

from bench.harness.config import RunConfig
from bench.harness.launch import threads_per_process
from bench.harness.records import RECORD_VERSION
from bench.predict import conformal
from bench.predict.calibration import Calibration
from bench.predict.costs import CostSource, optimizer_states, predict_memory, predict_step
from bench.predict.runtime import fitted
from bench.predict.scenario import scenario_for
from bench.predict.serves import knob_mismatch
from strategies import Launch, strategy_class


def prediction_record(calibration: CostSource, config: RunConfig, source: str,
                      held_out_errors: conformal.HeldOutErrors | None = None) -> dict[str, object]:
    """A record of kind ``prediction`` for ``config``: every figure named predicted. Its interval is the
    calibration's spread, widened to the quantile of ``held_out_errors`` (bench/predict/conformal.py: a
    sweep's earlier runs predicted from the same calibration) where that is wider. ValueError where a
    calibration timed other arithmetic than the run's (``knob_mismatch``)."""
    if isinstance(calibration, Calibration) and (mismatch := knob_mismatch(calibration, config)):
        raise ValueError(f"the run's {mismatch}: its blocks were timed in other arithmetic; calibrate in the "
                         "run's knobs or predict only runs that share the calibration's")
    scenario = scenario_for(config)
    step = predict_step(calibration, scenario, optimizer_states(config.workload.optimizer))
    interval = _interval(calibration, config, step.step_ms, held_out_errors)
    memory = predict_memory(calibration.blocks(threads_per_process(scenario.devices)), scenario,
                            optimizer_states(config.workload.optimizer),
                            getattr(calibration, "compute_bytes", 4))  # a GPU profile's precision
    return {
        "record_version": RECORD_VERSION, "kind": "prediction", "status": "ok",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "strategy": config.strategy, "model": config.workload.model, "preset": config.workload.preset,
        "device_count": config.run.devices, "global_batch_size": config.run.batch_size,
        "accelerator": config.run.accelerator,
        "config": dataclasses.asdict(scenario),
        "predicted_step_time_ms": step.step_ms,
        # None: a profile's (no spread measured)
        "predicted_step_time_ms_interval": [interval.low_ms, interval.high_ms] if interval else None,
        "predicted_interval_basis": interval.basis if interval else None,
        "predicted_samples_per_s": config.run.global_batch / step.step_ms * 1e3,
        "predicted_compute_ms": step.compute_ms, "predicted_exposed_comm_ms": step.exposed_comm_ms,
        "predicted_update_ms": step.update_ms, "predicted_bubble": step.bubble,
        "predicted_memory_by_kind": memory, "compute_source": source, "notes": step.notes,
        # the run's own timings entered the calibration: its error is in-sample, not held out
        "fitted": fitted(calibration, config),
        "predicted_timeline": [{"rank": s.rank, "kind": s.action.kind, "stage": s.action.stage,
                                "microbatch": s.action.microbatch, "start_ms": s.start, "end_ms": s.end}
                               for s in step.timeline],
    }


def _interval(calibration: CostSource, config: RunConfig, step_ms: float,
              held_out_errors: conformal.HeldOutErrors | None) -> conformal.Interval | None:
    """The calibration's own spread where the run's processes run (Calibration.spread_for), widened by
    ``held_out_errors``; None for a profile."""
    if not isinstance(calibration, Calibration):
        return None
    spread = calibration.spread_for(config.run.devices if strategy_class(config.strategy).launch == Launch.PER_DEVICE
                                    else 1)
    return conformal.interval(step_ms, spread, held_out_errors)
