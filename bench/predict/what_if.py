"""``bench predict --hardware``: what the run cannot see, per model and strategy, with its assumptions.

Adds to each prediction record the scaling efficiency (its predicted samples/s over devices x one
device's, both predicted from the same source at the same per-device batch), whether its memory fits
the profile's device, and what it rests on (the profile, its sources, the shares used and how far the
profile missed on the published rows); prints the table and the best strategy that fits
at each size. Everything here is PREDICTED.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.predict.achievable import LAUNCH_S
from bench.predict.costs import predict_step
from bench.predict.hardware import Hardware, RooflineSource
from bench.predict.profiles import GPUS
from bench.predict.scenario import Scenario
from strategies import REFERENCE

PUBLISHED = Path(__file__).parent / "data" / "train.csv"
"""The published rows the profiles were checked against (a copy of ../shared/published/train.csv)."""


def published_check(hardware: Hardware) -> str:
    """How far the profile's GPU (else its architecture) missed on the published rows, as one line."""
    from bench.predict.published import prediction_records, read_rows, summarize

    if not PUBLISHED.exists():
        return f"not checked: {PUBLISHED} is missing"
    records = prediction_records(read_rows(PUBLISHED), str(PUBLISHED))
    gpus = {key for key, gpu in GPUS.items() if gpu is hardware.gpu}
    mine = [r for r, row in zip(records, read_rows(PUBLISHED), strict=True) if row["gpu"] in gpus]
    scope = f"the {len(mine)} published rows on {hardware.gpu.name}"
    if not any(r["status"] == "ok" for r in mine):
        arch = {key for key, gpu in GPUS.items() if gpu.architecture == hardware.gpu.architecture}
        mine = [r for r, row in zip(records, read_rows(PUBLISHED), strict=True) if row["gpu"] in arch]
        scope = f"no published row on {hardware.gpu.name}; the {len(mine)} on {hardware.gpu.architecture} GPUs"
    s = summarize(mine)
    if s.median is None:
        return f"not checked: {scope} could not be predicted"
    return (f"checked on {scope} ({PUBLISHED.name}, rows the shares were partly fitted to): median |error| "
            f"{s.median:.1%}, largest {s.largest:.1%}; bench predict --published {PUBLISHED} prints each")


def assumptions(hardware: Hardware, source: RooflineSource) -> list[str]:
    """What a what-if prediction rests on: the profile and its sources, the shares used, the published check."""
    shares = ", ".join(f"{kind} {share:.2f}" for kind, share in sorted(source.efficiencies.items()))
    return [
        f"profile {hardware.key}: {hardware.source}",
        f"compute at achievable shares of the data sheet ({hardware.gpu.architecture}): {shares}; "
        f"backward twice the forward; at least {LAUNCH_S * 1e6:.0f} us per kernel launch",
        *(f"share source: {line}" for line in hardware.shares.sources),
        f"communication: NCCL rings in nodes of {hardware.node_size} over {hardware.gpu.nvlink.name}, each GPU's "
        f"NIC carrying 1/{hardware.node_size} of the ring's bytes across nodes"
        f"{f' ({hardware.network.name})' if hardware.network else ' (one node: no network)'}; "
        "pipeline neighbours over the link between their ranks",
        f"memory: fp32 parameters, gradients and optimizer state; activations in {source.precision}",
        published_check(hardware),
        "no stragglers, no contention between jobs, no input pipeline limit",
    ]


def what_if_fields(records: list[dict[str, Any]], source: RooflineSource, hardware: Hardware, precision: str,
                   scaling: str) -> list[str]:
    """Adds ``hardware``, ``predicted_scaling_efficiency``, ``predicted_fits_memory``, ``assumptions`` and
    ``efficiencies``; returns the assumptions."""
    rests_on = assumptions(hardware, source)
    one_device: dict[int, float] = {}
    for record in records:
        devices = int(record["device_count"])
        per_device = int(record["global_batch_size"]) // devices
        if per_device not in one_device:
            alone = predict_step(source, Scenario(REFERENCE, 1, per_device), 1)
            one_device[per_device] = per_device / alone.step_ms * 1e3
        memory = record["predicted_memory_by_kind"]
        total = memory.get("total", 0) if isinstance(memory, dict) else 0
        record.update(
            hardware=hardware.name, precision=precision, scaling=scaling, accelerator=f"{hardware.name} (predicted)",
            predicted_scaling_efficiency=float(record["predicted_samples_per_s"])
            / (devices * one_device[per_device]),
            predicted_fits_memory=total <= hardware.memory_bytes, assumptions=rests_on,
            efficiencies=dict(source.efficiencies), profile=hardware.key,
        )
    return rests_on


def print_predictions(records: list[dict[str, Any]], rests_on: list[str] | None = None) -> None:
    """One line per prediction, then the best strategy that fits at each device count (with --hardware)."""
    for r in records:
        extra = ""
        if "predicted_scaling_efficiency" in r:
            fits = "fits" if r["predicted_fits_memory"] else "DOES NOT FIT"
            extra = f"  efficiency {r['predicted_scaling_efficiency']:.2f}  {fits}"
        memory = r["predicted_memory_by_kind"]
        gib = (memory.get("total", 0) if isinstance(memory, dict) else 0) / 2**30
        print(f"{r['strategy']:<7} x{r['device_count']:<4} predicted {r['predicted_step_time_ms']:9.2f} ms/step "
              f"{r['predicted_samples_per_s']:12.1f} samples/s  {gib:7.2f} GiB/device{extra}")
    if records and "hardware" in records[0]:
        for devices in sorted({int(r["device_count"]) for r in records}):
            fitting = [r for r in records if r["device_count"] == devices and r["predicted_fits_memory"]]
            best = max(fitting, key=lambda r: float(r["predicted_samples_per_s"]), default=None)
            print(f"best at {devices} devices (predicted): {best['strategy'] if best else 'none fits'}")
        print("assumptions (all figures PREDICTED, none measured):")
        for line in rests_on or []:
            print(f"  - {line}")
