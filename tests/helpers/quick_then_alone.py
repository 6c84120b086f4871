"""pytest-xdist's load scheduling for the quick tests; then the launching ones a file at a time on every
worker; then the ``alone`` ones on the last worker with no other beside it (why: tests/helpers/parallel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController

from tests.helpers.parallel import ALONE, LAST_WORKER, LAUNCHING_LIST


class QuickThenAlone(LoadScheduling):
    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.groups: dict[str, list[int]] = {}
        """Launching tests by group (their file), each handed whole to one worker once the quick ones are out."""
        self.alone: list[int] = []
        """Indices of the tests that time the machine, held back until one worker is left."""

    def schedule(self) -> None:
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                return
            collection = next(iter(self.node2collection.values()))
            launching = self._launching()
            self.collection = collection
            for i, nodeid in enumerate(collection):
                group = launching.get(nodeid)
                if group == ALONE:
                    self.alone.append(i)
                elif group is not None:
                    self.groups.setdefault(group, []).append(i)
            self.pending[:] = [i for i, nodeid in enumerate(collection) if nodeid not in launching]
            if self.maxschedchunk is None:
                self.maxschedchunk = len(collection)
            chunk = max(2, len(self.pending) // len(self.nodes) // 4)
            for node in self.nodes:
                self._send_tests(node, chunk)
        for node in self.nodes:
            self.check_schedule(node)

    def _launching(self) -> dict[str, str]:
        """What the workers listed at collection (they all collect the same tests): node id -> group."""
        for node in self.nodes:
            path = Path(node.workerinput[LAUNCHING_LIST])
            if path.exists():
                rows = (line.split("\t") for line in path.read_text().splitlines() if line)
                return {nodeid: group for nodeid, group in rows}
        return {}

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            super().check_schedule(node, duration)
            return
        if len(self.node2pending[node]) >= 2:  # still busy with what it was sent
            return
        last = node is self.nodes[-1]
        group = next((g for g in self.groups if last or g != LAST_WORKER), None)
        if group is not None:
            tests = self.groups.pop(group)
            self.node2pending[node].extend(tests)
            node.send_runtest_some(tests)
        elif not last or not self.alone:
            node.shutdown()
        elif len(self.node2pending) == 1:  # every other worker has finished: the machine is this one's
            alone, self.alone = self.alone, []
            self.node2pending[node].extend(alone)
            node.send_runtest_some(alone)
            node.shutdown()

    def remove_node(self, node: WorkerController) -> str | None:
        crashed = super().remove_node(node)
        for left in self.nodes:  # a worker that finished may leave the alone tests to the last one
            self.check_schedule(left)
        return crashed

    @property
    def tests_finished(self) -> bool:
        return not self.alone and not self.groups and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.alone) or bool(self.groups) or super().has_pending
