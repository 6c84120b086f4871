"""tests/helpers/parallel.py's scheduler: quick tests over every worker, then the launching ones a file at a
time on every worker, then the ``alone`` ones on the last worker once the others have finished (so that no
run is timed beside another worker's tests)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("xdist")

from xdist.scheduler import LoadScheduling  # noqa: E402

from tests.helpers.parallel import ALONE, LAST_WORKER, LAUNCHING_LIST  # noqa: E402
from tests.helpers.quick_then_alone import QuickThenAlone  # noqa: E402

LAUNCHING = {"a.py::one": "a.py", "a.py::two": "a.py", "b.py::one": "b.py", "b.py::two": "b.py",
             "c.py::reads_the_session_run": LAST_WORKER, "t.py::timed": ALONE, "t.py::timed_too": ALONE}
COLLECTION = [f"t.py::quick{i}" for i in range(8)] + list(LAUNCHING)
QUICK = range(8)


class Worker:
    """What a scheduler sees of an xdist worker: it is sent test indices and asked to shut down."""

    def __init__(self, name: str, listing: Path) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.workerinput = {LAUNCHING_LIST: str(listing)}
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _config() -> SimpleNamespace:
    options = {"tx": ["popen", "popen"], "maxschedchunk": None, "numprocesses": 2}
    return SimpleNamespace(getvalue=options.get, getoption=lambda name, default=None: options.get(name, default))


def _run(scheduler_class: type, tmp_path: Path) -> tuple[Worker, Worker, list[tuple[str, int, int]]]:
    """Runs every test as the workers would, each finishing what it was sent in order; returns the
    workers and the log of (worker, test index, tests still unfinished on the other worker)."""
    listing = tmp_path / "gw0.txt"
    listing.write_text("".join(f"{nodeid}\t{group}\n" for nodeid, group in LAUNCHING.items()))
    first, last = Worker("gw0", listing), Worker("gw1", listing)
    sched = scheduler_class(_config())
    for worker in (first, last):
        sched.add_node(worker)
        sched.add_node_collection(worker, COLLECTION)
    sched.schedule()
    log, done = [], {first: 0, last: 0}
    while not sched.tests_finished or any(w in sched.node2pending for w in (first, last)):
        moved = False
        for worker, other in ((first, last), (last, first)):
            if worker not in sched.node2pending:
                continue
            pending = sched.node2pending[worker]
            # A worker runs an item once it knows the next one, or that it is shutting down.
            if pending and (len(pending) >= 2 or worker.shutting_down):
                index = pending[0]
                log.append((worker.gateway.id, index, len(sched.node2pending.get(other, []))))
                sched.mark_test_complete(worker, index)
                done[worker] += 1
                moved = True
            elif not pending and worker.shutting_down:
                sched.remove_node(worker)
                moved = True
        if not moved:
            break
    return first, last, log


def _on(log: list[tuple[str, int, int]], nodeid: str) -> tuple[str, int]:
    """(worker, tests unfinished on the other worker) when ``nodeid`` ran."""
    (ran,) = [(worker, others_left) for worker, index, others_left in log if COLLECTION[index] == nodeid]
    return ran


def test_alone_tests_run_on_one_worker_after_every_other_has_finished(tmp_path: Path) -> None:
    _, _, log = _run(QuickThenAlone, tmp_path)
    assert sorted(index for _, index, _ in log) == list(range(len(COLLECTION)))  # every test once
    assert [_on(log, t) for t in ("t.py::timed", "t.py::timed_too")] == [("gw1", 0), ("gw1", 0)]
    assert {worker for worker, index, _ in log if index in QUICK} == {"gw0", "gw1"}  # the quick ones shared


def test_launching_tests_run_side_by_side_a_file_at_a_time_after_the_quick_ones(tmp_path: Path) -> None:
    _, _, log = _run(QuickThenAlone, tmp_path)
    workers = {nodeid: _on(log, nodeid)[0] for nodeid in LAUNCHING}
    assert workers["a.py::one"] == workers["a.py::two"] and workers["b.py::one"] == workers["b.py::two"]
    assert workers["a.py::one"] != workers["b.py::one"]  # two files, two workers
    assert workers["c.py::reads_the_session_run"] == "gw1"  # where the alone tests will find the session's runs
    first_launching = min(i for i, (_, index, _) in enumerate(log) if index not in QUICK)
    assert all(index not in QUICK for _, index, _ in log[first_launching:])


def test_xdists_own_load_scheduling_fails_it(tmp_path: Path) -> None:
    _, _, log = _run(LoadScheduling, tmp_path)
    assert [_on(log, t) for t in ("t.py::timed", "t.py::timed_too")] != [("gw1", 0), ("gw1", 0)]
