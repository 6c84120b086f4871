"""Which runs a calibration serves: the arithmetic it timed, and the device counts it measured."""

from __future__ import annotations

from bench.harness.config import RunConfig
from bench.predict.calibration import Calibration

CALIBRATED_KNOBS = {"channels_last": False, "compile": False}
"""How calibration times the blocks (bench/predict/compute.py): contiguous tensors, no torch.compile."""


def knob_mismatch(calibration: Calibration, config: RunConfig) -> str | None:
    """The run's arithmetic knobs that differ from those the calibration timed, as one line (None: the same).

    A bf16, channels-last or compiled run predicted from fp32 eager timings would compare different
    arithmetic, and its ``prediction_error`` would mean nothing: such runs are left unpredicted."""
    calibrated = {"precision": calibration.precision, **CALIBRATED_KNOBS}
    run = {"precision": config.run.precision, "channels_last": bool(config.knobs.channels_last),
           "compile": config.knobs.compile}
    differ = [f"{knob} {run[knob]} (calibrated: {calibrated[knob]})" for knob in calibrated
              if run[knob] != calibrated[knob]]
    return ", ".join(differ) or None


def nearest_count_notes(calibration: Calibration, devices: int) -> list[str]:
    """Says so where ``devices`` processes were not calibrated and the nearest count measured stands in."""
    measured = [n for n in calibration.communication if n > 1]  # 1: one ddp rank's runtime, no collectives
    if devices <= 1 or devices in measured or not measured:
        return []
    nearest = min(measured, key=lambda n: (abs(n - devices), -n))
    return [f"no collectives or runtimes measured on {devices} processes: predicted from those measured on "
            f"{nearest} (collective bytes scaled by the ring's share); calibrate --devices {devices} to measure them"]
