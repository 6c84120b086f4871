"""A clock advanced by hand, standing in for ``time`` where a test asserts exact timings."""

from __future__ import annotations


class FakeClock:
    """``time.perf_counter`` and ``time.time`` as one hand-set value, in seconds."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now
