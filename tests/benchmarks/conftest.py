"""The benchmark matrix: one case per strategy x model x device count that can run on this machine."""

from __future__ import annotations

import pytest

from strategies import STRATEGIES, Launch
from tests.helpers.matrix import Case, cases, refusal


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``test_step`` gets the in-process cases, ``test_torchrun_launch`` the one-process-per-device ones."""
    if "case" in metafunc.fixturenames:
        wanted = Launch.IN_PROCESS if metafunc.definition.name == "test_step" else Launch.PER_DEVICE
        matrix = [c for c in cases(metafunc.config) if STRATEGIES[c.strategy].launch is wanted]
        metafunc.parametrize("case", [_planned(c) for c in matrix])


def _planned(case: Case) -> object:
    """``case`` as a parameter, skipped with bench's reason where bench refuses it (the sweep's skipped row)."""
    why = refusal(case)
    return pytest.param(case, id=case.id, marks=[pytest.mark.skip(reason=f"bench refuses it: {why}")] if why else [])


@pytest.fixture(scope="session")
def single_throughput() -> dict[tuple[str, str], float]:
    """samples/s of ``single`` per (model, preset), as the session measured it: the base of scaling efficiency."""
    return {}


@pytest.fixture
def bench_options(request: pytest.FixtureRequest) -> dict[str, object]:
    c = request.config
    return {"enabled": c.getoption("--benchmark"), "steps": c.getoption("--bench-steps"),
            "warmup": c.getoption("--bench-warmup")}
