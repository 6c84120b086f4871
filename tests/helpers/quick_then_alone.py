"""pytest-xdist's load scheduling for the quick tests; the launching ones on the last worker, alone
(why: tests/helpers/parallel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController

from tests.helpers.parallel import LAUNCHING_LIST


class QuickThenAlone(LoadScheduling):
    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.alone: list[int] = []
        """Indices of the launching tests, held back until one worker is left."""

    def schedule(self) -> None:
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                return
            collection = next(iter(self.node2collection.values()))
            launching = self._launching()
            self.collection = collection
            self.alone = [i for i, nodeid in enumerate(collection) if nodeid in launching]
            self.pending[:] = [i for i, nodeid in enumerate(collection) if nodeid not in launching]
            if self.maxschedchunk is None:
                self.maxschedchunk = len(collection)
            chunk = max(2, len(self.pending) // len(self.nodes) // 4)
            for node in self.nodes:
                self._send_tests(node, chunk)
        for node in self.nodes:
            self.check_schedule(node)

    def _launching(self) -> set[str]:
        """What the workers listed at collection (they all collect the same tests)."""
        for node in self.nodes:
            path = Path(node.workerinput[LAUNCHING_LIST])
            if path.exists():
                return set(filter(None, path.read_text().splitlines()))
        return set()

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            super().check_schedule(node, duration)
        elif not self.alone or node is not self.nodes[-1]:
            node.shutdown()
        elif len(self.node2pending) == 1:  # every other worker has finished: the machine is this one's
            alone, self.alone = self.alone, []
            self.node2pending[node].extend(alone)
            node.send_runtest_some(alone)
            node.shutdown()

    def remove_node(self, node: WorkerController) -> str | None:
        crashed = super().remove_node(node)
        for left in self.nodes:  # a worker that finished may leave the launching tests to the last one
            self.check_schedule(left)
        return crashed

    @property
    def tests_finished(self) -> bool:
        return not self.alone and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.alone) or super().has_pending
