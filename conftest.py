"""``pytest --benchmark`` (the benchmark matrix) and ``pytest -m quick`` (the inner loop).

``quick``: every test not marked ``distributed`` (several gloo processes), ``launches`` (a ``bench``
or Python child), ``alone`` (a launching test that times runs) or ``gpu`` is marked ``quick`` at
collection, and a quick test that starts a Python process fails with the reason, so that ``-m quick``
stays the few-seconds loop it claims to be.

``--benchmark``: the strategy x model x device-count matrix, timed by pytest-benchmark.

pytest-benchmark has no bare ``--benchmark`` flag; this adds it. Without it, every benchmark
case runs once as a smoke test (pytest-benchmark's ``--benchmark-disable``), so plain ``pytest``
stays fast; multi-process cases are skipped then, with the reason, since the equivalence
tests already run those strategies. pytest-benchmark's own flags (``--benchmark-json``,
``--benchmark-autosave``, ``--benchmark-compare``, ``--benchmark-columns``, ...) keep working.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.helpers.quick import no_python_processes

pytest_plugins = ["tests.helpers.parallel"]  # quick tests over xdist's workers, launching ones alone

LAUNCHING_MARKS = ("distributed", "launches", "alone", "gpu")
"""Tests carrying one of these start processes; every other test is ``quick``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parallelism suite benchmarks")
    group.addoption("--benchmark", action="store_true", help="run the benchmark matrix with real timing")
    group.addoption("--bench-strategies", default=None, help="comma-separated (default: every registered strategy)")
    group.addoption("--bench-models", default="mlp,cnn,rnn,transformer",
                    help="comma-separated (default: mlp,cnn,rnn,transformer)")
    group.addoption("--bench-preset", default=None, help="model size (default: large on GPUs, tiny on CPU)")
    group.addoption("--bench-devices", default=None, help="device counts, e.g. 1,2 (default: 1, 2, 4 ... present)")
    group.addoption("--bench-precision", default="auto", choices=("auto", "fp32", "tf32", "bf16", "fp16"),
                    help="--precision of every case (default: auto, bf16 on GPUs and fp32 on CPUs)")
    group.addoption("--bench-compile", action="store_true", help="torch.compile every case's blocks (not dp)")
    group.addoption("--bench-steps", type=int, default=10, help="timed rounds per case (default: 10)")
    group.addoption("--bench-warmup", type=int, default=3, help="untimed warm-up rounds per case (default: 3)")


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its options (its own hook runs last)
def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--benchmark"):
        config.option.benchmark_disable = True
        return
    if config.getoption("dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError(
            "--benchmark times one configuration at a time on the whole machine; run it without xdist (-n/--dist)"
        )


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """GPU names, count and topology, and the torch/CUDA/NCCL versions, next to pytest-benchmark's CPU info."""
    from bench.harness.environment import environment

    machine_info["parallelism_suite"] = environment()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(mark) for mark in LAUNCHING_MARKS):
            item.add_marker(pytest.mark.quick)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with no_python_processes() if item.get_closest_marker("quick") else contextlib.nullcontext():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with no_python_processes() if item.get_closest_marker("quick") else contextlib.nullcontext():
        return (yield)
