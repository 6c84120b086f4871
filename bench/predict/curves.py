"""What calibration measures against a size: a line in the batch's samples (compute) and a curve in a message's
bytes (collectives), each through the points measured."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Line:
    """Milliseconds by samples: straight through the measured ``points`` between them (beyond them, the
    nearest segment's slope), or ``fixed + per_sample x samples`` where none were measured (a roofline).

    Between measured batch sizes a least-squares line would miss them all a little: small batches run
    below a CPU's best rate, so it is piecewise, and the fit is kept for the record."""

    fixed: float
    per_sample: float
    points: tuple[tuple[float, float], ...] = ()

    def at(self, samples: float) -> float:
        return max(0.0, self.signed_at(samples))

    def signed_at(self, samples: float) -> float:
        """As ``at``, below zero where the measurements go there (a difference of two times may)."""
        if len(self.points) < 2:
            return self.fixed + self.per_sample * samples
        sizes = [n for n, _ in self.points]
        i = min(max(bisect.bisect_left(sizes, samples), 1), len(sizes) - 1)
        (n0, t0), (n1, t1) = self.points[i - 1], self.points[i]
        return t0 + (t1 - t0) / (n1 - n0) * (samples - n0)

    @classmethod
    def fit(cls, points: list[tuple[float, float]]) -> Line:
        """Through the measured (samples, ms), the least-squares line kept beside them; flat through one point."""
        if len(points) == 1:  # the point kept: it says which batch was timed (compute.timed_batches)
            return cls(0.0, points[0][1] / points[0][0], (points[0],))
        n = len(points)
        mx = sum(x for x, _ in points) / n
        my = sum(y for _, y in points) / n
        sxx = sum((x - mx) ** 2 for x, _ in points)
        slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
        return cls(my - slope * mx, slope, tuple(sorted((float(x), float(y)) for x, y in points)))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Line:
        return cls(float(data["fixed"]), float(data["per_sample"]),
                   tuple((float(n), float(ms)) for n, ms in data.get("points", ())))


@dataclass(frozen=True)
class Curve:
    """A collective's milliseconds by message bytes: measured points, linear between them in bytes
    (latency plus bytes over the bandwidth of that size range) and extended by the last range's slope."""

    points: list[tuple[int, float]]

    def at(self, size: float) -> float:
        if size <= 0:
            return 0.0
        sizes = [s for s, _ in self.points]
        i = min(max(bisect.bisect_left(sizes, size), 1), len(sizes) - 1)
        (s0, t0), (s1, t1) = self.points[i - 1], self.points[i]
        slope = (t1 - t0) / (s1 - s0) if s1 != s0 else 0.0
        return max(self.points[0][1] if size < s0 else 0.0, t0 + slope * (size - s0))


@dataclass(frozen=True)
class HeldLine:
    """Milliseconds by samples on the least-squares line through measured ``points``, held at the nearer end's
    value beyond them (a residual's slope is a difference of times over a few dozen samples: carried on, it
    leaves what was measured)."""

    fixed: float
    per_sample: float
    first: float
    last: float

    def at(self, samples: float) -> float:
        return self.fixed + self.per_sample * min(max(samples, self.first), self.last)

    @classmethod
    def fit(cls, points: list[tuple[float, float]]) -> HeldLine:
        line = Line.fit(points)
        sizes = [x for x, _ in points]
        return cls(line.fixed, line.per_sample, min(sizes), max(sizes))
