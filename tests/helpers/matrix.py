"""The benchmark matrix's cases: one per strategy x model x device count that can run on this machine."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, checked_microbatches, default_device_counts, gpus_available, resolve
from strategies import STRATEGIES, ConfigError


@dataclass(frozen=True)
class Case:
    strategy: str
    model: str
    devices: int
    preset: str
    precision: str = "auto"
    compile: bool = False

    @property
    def id(self) -> str:
        knobs = ("" if self.precision == "auto" else f"-{self.precision}") + ("-compiled" if self.compile else "")
        return f"{self.strategy}-{self.model}-{self.preset}-{self.devices}dev{knobs}"


def _device_counts(option: str | None) -> list[int]:
    if option:
        return [int(n) for n in option.split(",")]
    return list(default_device_counts("cuda" if gpus_available() else "cpu"))


def cases(config: pytest.Config) -> list[Case]:
    """The matrix: each strategy at each device count it can use, with the knobs it can take. Whether the
    model can take the strategy (a tensor-parallel plan, enough blocks for the stages) is ``refusal``'s to say."""
    strategies = (config.getoption("--bench-strategies") or ",".join(STRATEGIES)).split(",")
    model_names = config.getoption("--bench-models").split(",")
    preset = config.getoption("--bench-preset") or ("large" if torch.cuda.is_available() else "tiny")
    precision, compiled = config.getoption("--bench-precision"), config.getoption("--bench-compile")
    out = []
    for name in strategies:
        cls = STRATEGIES[name]
        if (compiled and cls.compile_refusal) or (precision == "fp16" and cls.fp16_refusal):
            continue  # the strategy says it cannot, whatever the model and the devices
        for devices in _device_counts(config.getoption("--bench-devices")):
            if devices < cls.min_devices or (cls.max_devices is not None and devices > cls.max_devices):
                continue
            out += [Case(name, model, devices, preset, precision, compiled) for model in model_names]
    return out


def refusal(case: Case) -> str | None:
    """Why ``bench`` refuses ``case`` (in its one line), or None where it runs: the matrix's tp on the cnn, say,
    which has no tensor-parallel plan. Such a case is skipped with that reason, as the sweep writes a skipped
    row for it, instead of failing on a 2-device machine."""
    try:
        resolve(base_config(case, 1, 0, str(Path(tempfile.gettempdir()) / "bench-matrix.jsonl")))
    except ConfigError as exc:
        return str(exc)
    return None


def base_config(case: Case, steps: int, warmup: int, out: str) -> RunConfig:
    return RunConfig.from_flags(strategy=case.strategy, model=case.model, preset=case.preset, devices=case.devices,
                                steps=steps, warmup=warmup, out=out, microbatches=checked_microbatches(case.strategy),
                                precision=case.precision, compile=case.compile)
