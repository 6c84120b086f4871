"""What ``bench fidelity``'s pp-vs-mp holds pp against, on CPUs and on CUDA (bench/experiments/fidelity/pipeline.py).

The rounds run with their processes and timings faked: what is checked is which runs they make, and
how the speed-ups are formed from what those runs report.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.experiments.fidelity import pipeline
from bench.experiments.fidelity.bubble import PipelineRound
from bench.harness.config import RunConfig


class _Queue:
    """Stands in for a worker's inbox (it keeps what is put) and the workers' outbox (it answers)."""

    def __init__(self, sent: list[RunConfig]) -> None:
        self.sent = sent

    def put(self, item: RunConfig | None) -> None:
        if item is not None:
            self.sent.append(item)

    def get(self, timeout: float | None = None) -> PipelineRound:
        return PipelineRound([40.0, 40.0], None, None)


class _Process:
    def start(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


class _Context:
    def __init__(self) -> None:
        self.sent: list[RunConfig] = []

    def Queue(self) -> _Queue:  # noqa: N802 (multiprocessing's name)
        return _Queue(self.sent)

    def Process(self, target: Any, args: tuple) -> _Process:  # noqa: N802
        return _Process()


@pytest.fixture
def faked_rounds(monkeypatch: pytest.MonkeyPatch) -> tuple[_Context, list[tuple[int, str, int]]]:
    """No processes and no GPU: the pp workers answer 40 ms a step, mp takes 60 ms, and every mp run is noted
    as (micro-batches, preset, threads)."""
    context = _Context()
    mp_runs: list[tuple[int, str, int]] = []

    def mp_step_times(config: RunConfig, threads: int) -> list[float]:
        assert config.strategy == "mp"
        mp_runs.append((config.split.microbatches, config.workload.preset, threads))
        return [60.0, 60.0]

    monkeypatch.setattr(pipeline, "rank_context", lambda: context)
    monkeypatch.setattr(pipeline, "resolve", lambda config: config)  # no CUDA device to resolve against here
    monkeypatch.setattr(pipeline, "_mp_step_times", mp_step_times)
    return context, mp_runs


def test_on_cuda_pp_is_held_against_mp_on_one_microbatch(faked_rounds: tuple[_Context, list]) -> None:
    # Before: mp ran with pp's M micro-batches, which CUDA's asynchronous launches already overlap.
    context, mp_runs = faked_rounds
    speedups, _ = pipeline.pp_vs_mp(RunConfig.from_flags(accelerator="cuda"), rounds=1, microbatches=(4, 8))
    assert sorted({m for m, _, _ in mp_runs}) == [1]
    assert {preset for _, preset, _ in mp_runs} == {"large"}
    assert sorted(c.split.microbatches for c in context.sent) == [4, 4, 8, 8]  # each of the 2 pp ranks, each M
    assert {(c.strategy, c.workload.preset, c.run.batch_size) for c in context.sent} == {("pp", "large", 1024)}
    assert [s.microbatches for s in speedups] == [4, 8]  # one mp side: threads do not time a GPU
    record = speedups[0].record_fields()
    assert (record["mp_microbatches"], record["speedup"], record["target"]) == (1, 1.5, "at least 85% of ideal")
    assert speedups[0].name == "pp vs mp, 2 stages, M=4, mp on one micro-batch (CUDA overlaps mp's micro-batches)"


def test_on_cpus_mp_feeds_pps_microbatches_on_both_thread_counts(faked_rounds: tuple[_Context, list]) -> None:
    context, mp_runs = faked_rounds
    speedups, _ = pipeline.pp_vs_mp(RunConfig.from_flags(accelerator="cpu"), rounds=1, microbatches=(4, 8))
    assert sorted({m for m, _, _ in mp_runs}) == [4, 8] and {p for _, p, _ in mp_runs} == {"small"}
    assert len(mp_runs) == 4  # M=4 and 8, on one pp rank's threads and on all of them
    assert {(c.workload.preset, c.run.batch_size) for c in context.sent} == {("small", 256)}
    assert [(s.microbatches, s.record_fields()["mp_microbatches"], s.target_share) for s in speedups] == [
        (4, 4, 0.85), (4, 4, None), (8, 8, 0.85), (8, 8, None)]


@pytest.mark.parametrize(("accelerator", "pp_m", "mp_m"),
                         [("cuda", 4, 1), ("cuda", 8, 1), ("cpu", 4, 4), ("cpu", 8, 8)])
def test_the_sides_micro_batches(accelerator: str, pp_m: int, mp_m: int) -> None:
    base = pipeline.pipeline_config(RunConfig.from_flags(accelerator=accelerator))
    assert pipeline.side_config(base, "pp", pp_m).split.microbatches == pp_m
    assert pipeline.side_config(base, "mp", pp_m).split.microbatches == mp_m
