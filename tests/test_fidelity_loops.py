"""The single-vs-plain-loop comparison (bench/experiments/fidelity/loops.py) held to its real target, "within 2%".

On 2 busy cores the tiny models' sub-millisecond steps move by more than 2% from run to run, so the
real-timings test (tests/test_fidelity.py) can only ask for a sane ratio. Here both sides train a model
whose forward sleeps a known time per sample (tests/faulty_models.py: sleeping): a step of ~80 ms, on
one thread (two threads wait for each other whenever another process holds a core, ~25 ms a step here),
with the machine's noise ~1% of it. Equal work must then meet the target, and a baseline doing half
or double the work must miss it, by the factor it is off. The same for ddp against the DDP tutorial's
script on 2 processes, at its 3% target (fsdp's comparison is measured by the same code, _side_by_side).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from bench.experiments.baselines.plain_loop import plain_step_times
from bench.experiments.fidelity import loops
from bench.harness.config import RunConfig, resolve
from tests.faulty_models import SLEEP_MS_PER_SAMPLE
from tests.helpers.baselines import plain_ddp_double_work

BATCH = 32
"""Samples per step: 80 ms of sleep per rank under ddp, so the harness's fixed 1-3 ms per step stays inside
the 3% a guard is held to (at 16, 40 ms, one CI run on a fresh clone measured ddp 3.6% over its plain loop)."""


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("work", [1.0, 0.5, 2.0], ids=["same work", "half the work", "double the work"])
def test_single_vs_plain_loop_meets_its_target_on_equal_work_only(
    work: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def baseline(model: str, preset: str, batch_size: int, *args: object) -> list[float]:
        return plain_step_times(model, preset, int(batch_size * work), *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loops, "plain_step_times", baseline)
    # Five timed steps where the ratio must land within 2%, three where it must miss by 2x.
    config = resolve(RunConfig.from_flags(model="tests.faulty_models:sleeping", preset="tiny", batch_size=BATCH,
                                          steps=5 if work == 1.0 else 3, warmup=1, out=str(tmp_path / "r.jsonl")))
    comparison = loops.single_vs_plain_loop(config, rounds=1)
    assert comparison.target == "within 2%"
    assert comparison.suite_ms >= BATCH * SLEEP_MS_PER_SAMPLE  # the sleep is inside the suite's clock ...
    assert comparison.baseline_ms >= BATCH * SLEEP_MS_PER_SAMPLE * work  # ... and inside the baseline's
    assert comparison.met is (work == 1.0), comparison.figure
    assert comparison.ratio == pytest.approx(1 / work, rel=0.1)


@pytest.mark.alone
@pytest.mark.distributed
@pytest.mark.parametrize("double", [False, True], ids=["same work", "double the work"])
def test_ddp_vs_plain_ddp_meets_its_target_on_equal_work_only(
    double: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if double:  # the ranks unpickle the script by name: it lives in tests/helpers
        monkeypatch.setattr(loops, "plain_ddp_step_times", plain_ddp_double_work)
    config = loops.ddp_fidelity_config(RunConfig.from_flags(model="tests.faulty_models:sleeping", preset="tiny",
                                                            batch_size=BATCH, steps=5, warmup=1,
                                                            out=str(tmp_path / "r.jsonl")))
    assert config is not None
    # The median of 5: with 3, a whole comparison (not one round) missed 3% once in CI on torch 2.11 (ratio 1.050).
    # Double the work misses by 2x, far beyond a round's noise: one round tells it.
    comparison = loops.ddp_vs_plain_ddp(config, rounds=1 if double else 5)
    assert comparison.target == "within 3%"
    assert comparison.met is not double, comparison.figure
    # The gradient all-reduce (a few ms here) is on both sides once, so double the work is a bit under 2x.
    assert comparison.ratio == pytest.approx(0.5 if double else 1.0, rel=0.2)
