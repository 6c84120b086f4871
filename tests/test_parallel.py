"""tests/helpers/parallel.py's scheduler: quick tests over every worker, the launching ones on the last
worker only once the others have finished (so that no run is timed beside another worker's tests)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("xdist")

from xdist.scheduler import LoadScheduling  # noqa: E402

from tests.helpers.parallel import LAUNCHING_LIST  # noqa: E402
from tests.helpers.quick_then_alone import QuickThenAlone  # noqa: E402

COLLECTION = [f"t.py::quick{i}" for i in range(8)] + ["t.py::launch_a", "t.py::launch_b"]


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
    listing.write_text("t.py::launch_a\nt.py::launch_b")
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


def test_launching_tests_run_on_one_worker_after_every_other_has_finished(tmp_path: Path) -> None:
    first, last, log = _run(QuickThenAlone, tmp_path)
    ran = sorted(index for _, index, _ in log)
    assert ran == list(range(len(COLLECTION)))  # every test once
    launching = [(worker, others_left) for worker, index, others_left in log if index >= 8]
    assert launching == [("gw1", 0), ("gw1", 0)]  # on the last worker, nothing left on the other
    assert {worker for worker, index, _ in log if index < 8} == {"gw0", "gw1"}  # the quick ones shared


def test_xdists_own_load_scheduling_fails_it(tmp_path: Path) -> None:
    _, _, log = _run(LoadScheduling, tmp_path)
    launching = [(worker, others_left) for worker, index, others_left in log if index >= 8]
    assert launching != [("gw1", 0), ("gw1", 0)]
