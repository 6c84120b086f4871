"""The benchmark matrix: one case per strategy x model x device count that can run on this machine."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

from bench.config import RunConfig, gpus_available
from strategies import STRATEGIES, Launch


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
    present = gpus_available() or min(os.cpu_count() or 1, 4)
    counts, n = [], 1
    while n <= present:
        counts.append(n)
        n *= 2
    return counts


def cases(config: pytest.Config) -> list[Case]:
    strategies = (config.getoption("--bench-strategies") or ",".join(STRATEGIES)).split(",")
    model_names = config.getoption("--bench-models").split(",")
    preset = config.getoption("--bench-preset") or ("large" if torch.cuda.is_available() else "tiny")
    out = []
    for name in strategies:
        cls = STRATEGIES[name]
        for devices in _device_counts(config.getoption("--bench-devices")):
            if devices < cls.min_devices or (cls.max_devices is not None and devices > cls.max_devices):
                continue
            out += [Case(name, model, devices, preset, config.getoption("--bench-precision"),
                         config.getoption("--bench-compile")) for model in model_names]  # fmt: skip
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``test_step`` gets the in-process cases, ``test_torchrun_launch`` the one-process-per-device ones."""
    if "case" in metafunc.fixturenames:
        wanted = Launch.IN_PROCESS if metafunc.definition.name == "test_step" else Launch.PER_DEVICE
        matrix = [c for c in cases(metafunc.config) if STRATEGIES[c.strategy].launch is wanted]
        metafunc.parametrize("case", matrix, ids=[c.id for c in matrix])


@pytest.fixture(scope="session")
def single_throughput() -> dict[tuple[str, str], float]:
    """samples/s of ``single`` per (model, preset), as the session measured it: the base of scaling efficiency."""
    return {}


@pytest.fixture
def bench_options(request: pytest.FixtureRequest) -> dict[str, object]:
    c = request.config
    return {"enabled": c.getoption("--benchmark"), "steps": c.getoption("--bench-steps"),
            "warmup": c.getoption("--bench-warmup")}  # fmt: skip


def base_config(case: Case, steps: int, warmup: int, out: str) -> RunConfig:
    return RunConfig(strategy=case.strategy, model=case.model, preset=case.preset, devices=case.devices,
                     steps=steps, warmup=warmup, out=out, microbatches=4 if "microbatches" in
                     STRATEGIES[case.strategy].sweep_options else 1, precision=case.precision,
                     compile=case.compile)  # fmt: skip
