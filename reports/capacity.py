"""The largest preset each strategy fits on the measured device: an extrapolation, labelled as one.

From one configuration's tracked memory (its largest device, bench/harness/memory.py) two rates are taken:

- state bytes per parameter: parameters, gathered parameters, gradients, optimizer state and
  buffers over the model's parameter count (so fsdp on N devices holds about 16/N for fp32 SGD
  with momentum, ddp 12);
- everything else (activations, temporaries) per sample of the global batch.

Another preset of the same family, trained by the same strategy at the same global batch, is then
predicted to hold ``state rate x its parameters + rest x r``, where ``r`` is the ratio of the bytes
its forward saves for backward to the measured preset's, counted on the meta device (shapes only:
no memory, no arithmetic). It fits where that is within one device's memory: a GPU's, or on a CPU
the host's divided among the processes that share it (the tracker sees a process as one device).
Not a measurement: allocator slack, fragmentation and the runtime's own memory are not in it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import pandas as pd
import torch

import models
from models.sizes import parameter_counts, saved_bytes_per_sample

STATE_KINDS = ("parameters", "gathered_parameters", "gradients", "optimizer_state", "buffers")


@functools.cache
def preset_sizes(family: str, preset: str) -> tuple[int, float]:
    """(parameters, bytes saved for backward per sample) of a preset, counted on the meta device."""
    with torch.device("meta"):
        spec = models.build_model(family, preset)
    return sum(parameter_counts(spec.blocks)), sum(saved_bytes_per_sample(spec))


def largest_presets(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tracked configuration (undisturbed, its device's memory known): each preset's extrapolated
    GiB per device and the largest preset that fits. Empty where no record allows it."""
    needed = {"mem_total_mib", "device_memory_bytes", "model", "preset"}
    if runs.empty or not needed <= set(runs.columns):
        return pd.DataFrame()
    tracked = runs.dropna(subset=["mem_total_mib", "device_memory_bytes"])
    tracked = tracked[tracked["model"].isin(models.FAMILIES)]
    rows = [_row(r) for r in tracked.to_dict("records")]
    return pd.DataFrame([r for r in rows if r is not None])


def _row(run: dict) -> dict[str, Any] | None:
    measured_params, measured_saved = preset_sizes(run["model"], run["preset"])
    state = sum(_value(run, f"mem_{kind}_mib") for kind in STATE_KINDS) * 2**20
    # Activations are tracked at their own peak (the forward's end), which the step's total may not include.
    rest = max(run["mem_total_mib"] * 2**20 - state, _value(run, "mem_activations_mib") * 2**20, 0.0)
    if measured_params == 0 or measured_saved == 0:
        return None
    per_parameter = state / measured_params
    row: dict[str, Any] = {
        "panel": run["panel"], "devices": run["devices"], "variant": run["variant"],
        "global_batch": run["global_batch"], "state bytes per parameter": round(per_parameter, 2),
        "other MiB per sample": _significant(rest / run["global_batch"] / 2**20),
        "device MiB": _significant(device_capacity(run) / 2**20),
    }
    fits = None
    for preset in models.PRESETS:
        params, saved = preset_sizes(run["model"], preset)
        predicted = per_parameter * params + rest * saved / measured_saved
        row[f"{preset} MiB (extrapolated)"] = _significant(predicted / 2**20)
        fits = preset if predicted <= device_capacity(run) else fits
    row["largest preset that fits (extrapolated)"] = fits or "none"
    return row


def device_capacity(run: dict) -> float:
    """One device's bytes. On a CPU the tracker's "device" is a process (mp's emulated devices share
    one), and the processes share the host's memory."""
    if run["accelerator"] == "cpu":
        return run["device_memory_bytes"] / max(1, int(run.get("processes") or run["devices"]))
    return float(run["device_memory_bytes"])


def _significant(value: float) -> float:
    return float(f"{value:.3g}")


def _value(run: dict, column: str) -> float:
    value = run.get(column)
    return 0.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
