"""The whole suite on every core, its timings untouched: quick tests spread over pytest-xdist's workers,
then the launching ones a file at a time on every worker, then those that time the machine on one alone.

A quick test computes on one core and starts no process, so two of them side by side on two cores take
half the time. Most launching tests check what a run computes or writes (a strategy trains like one
device, a fault becomes a row): they spend their time starting interpreters that import torch, one core
each, and two of them side by side lose nothing they assert. A test marked ``alone`` times a run or judges
whether other work disturbed it (bench/harness/disturbance.py): beside a second worker its timing target
would flake, its calibration would be refused as disturbed. So ``QuickThenAlone`` hands out the quick
tests as xdist's load scheduler does; then each file's launching tests, whole, to the next free worker
(tests that share a session fixture of tests/conftest.py to the last worker, where the ``alone`` ones
that read them will run); and only once every other worker has finished gives the ``alone`` tests, in
collection order, to the last.

Without pytest-xdist installed nothing changes: the suite runs in one
process. With it, ``python -m pytest`` over the whole suite (no file or test named, no ``-s``/``--pdb``,
no ``--benchmark``) starts up to 4 workers by itself; ``-n N`` picks the count, ``-n 0`` or ``-p no:xdist``
runs serially, and a file or test named on the command line runs in this process, so the inner loop
does not pay for starting workers.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from pathlib import Path

import pytest

MAX_WORKERS = 4
"""Workers started when none are asked for: each imports torch (2 s of a core) before its first test."""
LAUNCHING_LIST = "bench_launching_list"
"""The workerinput key naming the file a worker lists its launching tests in (node id, tab, group), for the
controller's scheduler."""
ALONE = "alone"
"""The marker, and the group, of the tests that run with no other test beside them."""
LAST_WORKER = "tests/conftest.py"
"""The group of the launching tests that read a session fixture of tests/conftest.py (a run launched once)."""
_ENABLED = pytest.StashKey[bool]()
_LISTS = pytest.StashKey[tempfile.TemporaryDirectory]()
_THREADS = pytest.StashKey[int]()
"""A worker's torch threads before it took one for the quick tests."""


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _whole_suite_serially(config: pytest.Config) -> bool:
    """Whether this is the controller of a whole-suite run the user did not parallelise or keep serial."""
    return (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and config.getoption("numprocesses", None) is None
        and config.getoption("dist", "no") == "no"
        and config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.getoption("benchmark", False)
        and not config.getoption("collectonly")
        and not config.getoption("usepdb")
        and config.getoption("capture") != "no"
        and _cores() >= 2
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's own pytest_configure (trylast) starts its session
def pytest_configure(config: pytest.Config) -> None:
    if _whole_suite_serially(config):
        workers = min(_cores(), MAX_WORKERS)
        config.option.numprocesses = workers
        config.option.dist = "load"
        config.option.tx = ["popen"] * workers
    config.stash[_ENABLED] = config.getoption("dist", "no") == "load" and not hasattr(config, "workerinput")
    if hasattr(config, "workerinput"):
        import torch

        # One core per worker while the quick tests share the machine; the launching phase has it whole.
        config.stash[_THREADS] = torch.get_num_threads()
        torch.set_num_threads(1)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # noqa: ANN001 (xdist's WorkerController)
    if _LISTS not in node.config.stash:
        node.config.stash[_LISTS] = tempfile.TemporaryDirectory(prefix="bench-launching-")
    node.workerinput[LAUNCHING_LIST] = os.path.join(node.config.stash[_LISTS].name, f"{node.gateway.id}.txt")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _LISTS in config.stash:
        config.stash[_LISTS].cleanup()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201
    if not config.stash.get(_ENABLED, False):
        return None
    from tests.helpers.quick_then_alone import QuickThenAlone  # imports xdist, which the GPU machines lack

    return QuickThenAlone(config, log)


@pytest.hookimpl(trylast=True)  # after the root conftest.py has marked the quick tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: lists the launching tests' node ids where the controller's scheduler reads them."""
    path = getattr(config, "workerinput", {}).get(LAUNCHING_LIST)
    if path:
        Path(path).write_text("".join(f"{item.nodeid}\t{_group(item)}\n" for item in items
                                      if not item.get_closest_marker("quick")))


def _group(item: pytest.Item) -> str:
    """Where a launching test runs: alone, on the last worker beside the session's shared runs, or with its file."""
    if item.get_closest_marker(ALONE):
        return ALONE
    fixtures = getattr(item, "_fixtureinfo", None)
    shared = Path(str(item.config.rootpath), LAST_WORKER)
    for definitions in (fixtures.name2fixturedefs.values() if fixtures else ()):
        definition = definitions[-1]
        if definition.scope == "session" and Path(inspect.getfile(definition.func)) == shared:
            return LAST_WORKER
    return item.nodeid.split("::")[0]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a worker, before a launching test: its threads as a serial run has them (it runs alone by then)."""
    if _THREADS in item.config.stash and not item.get_closest_marker("quick"):
        import torch

        torch.set_num_threads(item.config.stash[_THREADS])
