"""``bench sweep`` predicts each configuration before it runs it: a calibration per model, then a
prediction per run, handed to the child whose record keeps it beside the measurement.

``--calibration auto`` (the default) reuses ``<results folder>/calibration-<model>-<preset>.json``
when it was taken on this machine for this model, and calibrates first otherwise;
``--calibration FILE`` uses that file for every model it matches; ``none`` predicts nothing.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import models
from bench.harness.attach import handed_over, rescored
from bench.harness.config import RunConfig
from bench.harness.environment import environment
from bench.harness.records import amend_newest, read_records
from bench.harness.runner import optimizer_choice
from bench.predict.calibrate import calibrate, machine_identity
from bench.predict.calibration import Calibration, Canary
from bench.predict.canary import DRIFT_LIMIT, canary_layout, canary_ms, corrected, drift_fields, taken_out
from bench.predict.compute import Disturbed
from bench.predict.conformal import HeldOutErrors, held_out_errors
from bench.predict.costs import predicted_strategies
from bench.predict.record import prediction_record
from bench.predict.runtime import any_several_stages_a_rank
from strategies import ConfigError, Launch, strategy_class

log = logging.getLogger(__name__)

LARGEST_MESSAGE = 256 * 2**20


Reading = tuple[tuple[str, str, int, int], float]
"""A canary timed: its layout (model, preset, threads, samples; ``_layout``) and its milliseconds."""


@dataclass(frozen=True)
class Handed:
    """What a run was handed: its prediction as made (no drift taken out), and its layout's canary at
    calibration and just before the run."""

    prediction: dict[str, object]
    calibrated: Canary
    before_ms: float


@dataclass
class SweepPredictor:
    """Calibrations by (model, preset), and the predictions made from them."""

    calibrations: dict[tuple[str, str], Calibration] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)
    out: Path | None = None
    """The sweep's records: the runs it measured so far widen the next prediction's interval to their errors."""
    handed: dict[RunConfig, Handed] = field(default_factory=dict)
    """What the runs not yet ended were handed, by configuration: ``after_run`` times their canary again."""
    last_after: Reading | None = None
    """The canary ``after_run`` timed last (model, preset, threads, samples; ms), until the next run is handed its
    prediction: a next run of the same layout starts from that reading, taken a moment before, instead of timing
    the same step again (0.25-0.3 s a canary for the small mlp: 15 of the main job's 27 runs took the reading)."""

    def env_for(self, config: RunConfig) -> dict[str, str]:
        """The environment entry that hands ``config``'s prediction to its run; empty where none is made."""
        key = (config.workload.model, config.workload.preset)
        last_after, self.last_after = self.last_after, None  # the previous run's: only the next run takes it
        if key not in self.calibrations or config.strategy not in predicted_strategies():
            return {}
        calibration = self.calibrations[key]
        try:
            record = prediction_record(calibration, config, self.sources[key],
                                       self._held_out_errors(key, config.strategy))
        except (ValueError, KeyError) as exc:  # a setting the cost models do not cover: measured, not predicted
            log.warning("%s on %d device(s): not predicted: %s", config.strategy, config.run.devices, exc)
            return {}
        # Timed here, just before the run starts: how far the machine moved since it was calibrated.
        calibrated, before = self._canary(calibration, config, last_after)
        if calibrated is not None and before is not None:
            self.handed[config] = Handed(record, calibrated, before)
        return handed_over(drift_taken_out(record, calibrated, before))

    def after_run(self, config: RunConfig, out: Path, measured: bool) -> bool:
        """Times the canary of ``config``'s run again now that it has ended, and amends its record in ``out``: the
        prediction scaled by the canary before and after it (``canary.bracketed``). False where nothing was
        amended (not ``measured``, no prediction or canary handed over, the newest record not this run's)."""
        handed = self.handed.pop(config, None)
        if handed is None or not measured:
            return False
        after = self._timed(config, handed.calibrated)
        self.last_after = (_layout(config, handed.calibrated), after)
        prediction = drift_taken_out(handed.prediction, handed.calibrated, handed.before_ms, after)

        as_json = json.dumps(config.as_dict(), sort_keys=True)  # a record's lists were the config's tuples

        def this_run(record: dict[str, Any]) -> bool:
            return (record.get("status") == "ok" and isinstance(record.get("prediction"), dict)
                    and json.dumps(record.get("config"), sort_keys=True) == as_json)

        return amend_newest(out, this_run, lambda record: rescored(record, prediction))

    def _canary(self, calibration: Calibration, config: RunConfig,
                last_after: Reading | None = None) -> tuple[Canary | None, float | None]:
        """The calibration's canary of ``config``'s layout (one pass of one of its processes: as many as its
        devices, or one), and the same step timed now (``last_after``'s reading where it is of that layout); None
        for either where the calibration timed none there."""
        processes = config.run.devices if strategy_class(config.strategy).launch == Launch.PER_DEVICE else 1
        calibrated = calibration.canary_for(*canary_layout(config.run.global_batch, processes,
                                                             config.split.microbatches))
        if calibrated is None:
            return None, None
        if last_after is not None and last_after[0] == _layout(config, calibrated):
            timed = last_after[1]
        else:
            timed = self._timed(config, calibrated)
        if abs(timed / calibrated.ms - 1) > DRIFT_LIMIT:  # timed again: a burst of other work passes, a shift stays
            timed = min(timed, self._timed(config, calibrated))
        return calibrated, timed

    @staticmethod
    def _timed(config: RunConfig, calibrated: Canary) -> float:
        """``calibrated``'s canary step timed now, for ``config``'s model."""
        make_spec = functools.partial(models.build_model, config.workload.model, config.workload.preset,
                                      config.workload.norm)
        device = torch.device("cuda" if config.run.accelerator == "cuda" else "cpu")
        return canary_ms(make_spec, calibrated.batch, calibrated.threads, optimizer_choice(config).build, device)

    def _held_out_errors(self, key: tuple[str, str], strategy: str) -> HeldOutErrors | None:
        """What this calibration's earlier predictions (of ``strategy`` where there are enough) missed by, on the
        runs the sweep measured so far."""
        if self.out is None:
            return None
        records = read_records(self.out)[0] if self.out.exists() else []
        return held_out_errors(records, self.sources[key], strategy)


def _layout(config: RunConfig, canary: Canary) -> tuple[str, str, int, int]:
    return config.workload.model, config.workload.preset, canary.threads, canary.batch


def drift_taken_out(prediction: dict[str, object], calibrated: Canary | None, before_ms: float | None,
                    after_ms: float | None = None) -> dict[str, object]:
    """``prediction`` scaled by its canary's drift (``canary.taken_out``), the canary's fields and note added."""
    canary, note = drift_fields(calibrated, before_ms, after_ms)
    notes = prediction["notes"]
    assert isinstance(notes, list)
    drift = canary["canary_drift"]
    return {**corrected(prediction, taken_out(drift) if isinstance(drift, float) else None), **canary,
            "notes": [*notes, *([note] if note else [])]}


def check_calibration_choice(choice: str) -> None:
    """ConfigError (one line) where ``choice`` is neither auto, none nor an existing file."""
    if choice not in ("auto", "none") and not Path(choice).is_file():
        raise ConfigError(f"--calibration {choice}: no such file (or auto, none)")


def sweep_predictor(choice: str, configs: list[RunConfig], devices: tuple[int, ...],
                    microbatches: tuple[int, ...], out: Path) -> SweepPredictor:
    """Loads or takes the calibrations ``choice`` asks for. ConfigError (one line) for a file that
    cannot serve: unreadable, or of another machine."""
    predictor = SweepPredictor(out=out)
    if choice == "none" or not configs:
        return predictor
    machine = machine_identity(environment())
    given = None if choice == "auto" else Calibration.load(Path(choice))
    if given is not None:
        for key in {(c.workload.model, c.workload.preset) for c in configs}:
            try:
                given.check_matches(machine, *key)
            except ConfigError:
                continue
            predictor.calibrations[key], predictor.sources[key] = given, f"calibration {choice}"
        if not predictor.calibrations:
            given.check_matches(machine, configs[0].workload.model,
                                configs[0].workload.preset)  # says why it serves none
        return predictor
    firsts: dict[tuple[str, str], RunConfig] = {}
    for config in configs:
        firsts.setdefault((config.workload.model, config.workload.preset), config)
    variants = needs_variants(configs)
    for key, config in firsts.items():
        path = out.parent / f"calibration-{key[0]}-{key[1]}.json"
        calibration = _reusable(path, machine, key, variants)
        if calibration is None:
            log.info("calibrating %s/%s on this machine -> %s", *key, path)
            try:
                calibration = calibrate(config, devices, microbatches, _largest_message(config), repeats=5,
                                        variants=variants)
            except Disturbed as exc:  # the runs are still measured (and judged); only their predictions go
                log.warning("%s/%s is not predicted: %s", *key, exc)
                continue
            except Exception as exc:  # a calibration that fails costs its model's predictions, not the sweep
                log.warning("%s/%s is not predicted: its calibration failed: %s: %s", *key, type(exc).__name__, exc)
                continue
            calibration.save(path)
        predictor.calibrations[key], predictor.sources[key] = calibration, f"calibration {path}"
    return predictor


def needs_variants(configs: list[RunConfig]) -> bool:
    """Whether any of ``configs`` runs several stages a rank, whose residuals only the reference runs' variants
    fit (pp's interleaved: in the main job 2 runs of 1.1-1.6 s on each of 3 groups of 2 ranks, 8 s of calibration)."""
    return any(c.pipeline.stages_per_rank > 1 for c in configs)


def _reusable(path: Path, machine: dict[str, object], key: tuple[str, str], variants: bool) -> Calibration | None:
    if not path.exists():
        return None
    try:
        calibration = Calibration.load(path)
        calibration.check_matches(machine, *key)
    except ConfigError as exc:
        log.warning("%s not reused: %s", path, exc)
        return None
    if variants and not any_several_stages_a_rank(calibration.fitted_runs or ()):
        log.warning("%s not reused: it ran no reference run of several stages a rank, which this sweep's schedules "
                    "need", path)
        return None
    return calibration


def _largest_message(config: RunConfig) -> int:
    """The largest message the strategies send for this model: its whole gradient, at most 256 MiB."""
    import torch

    import models
    from models.sizes import parameter_counts

    with torch.device("meta"):
        parameters = sum(parameter_counts(models.build_model(config.workload.model, config.workload.preset,
                                                             config.workload.norm).blocks))
    size = 4 * 2**10
    while size < 4 * parameters and size < LARGEST_MESSAGE:
        size *= 4
    return size


def pipeline_predictor(choice: str, config: RunConfig, out: Path) -> tuple[Calibration, str] | None:
    """The calibration ``bench fidelity`` explains pp-vs-mp with (``config``: that comparison's, on 2
    devices with 4 and 8 micro-batches), as ``choice`` asks; None for ``none``."""
    predictor = sweep_predictor(choice, [config], (1, config.run.devices), (4, 8), out)
    key = (config.workload.model, config.workload.preset)
    return (predictor.calibrations[key], predictor.sources[key]) if key in predictor.calibrations else None
