"""Schedule arithmetic, fitting rules, balance parsing and bubble figures: pure functions, literal tables."""

from __future__ import annotations

import types

import pytest

from strategies.partition import explicit_balance
from strategies.pipeline import check_p2p_backend
from strategies.schedules import (
    BY_NAME,
    available_schedules,
    check_microbatches,
    check_schedule,
    clock_cycles,
    fill_drain_bubble,
    formula_bubble,
    ideal_speedup,
    schedule_info,
    stages_of_rank,
)


@pytest.mark.parametrize(
    ("schedule", "p", "m", "v", "expected"),
    [
        ("gpipe", 2, 4, 1, 1 / 5),
        ("gpipe", 4, 4, 1, 3 / 7),
        ("1f1b", 4, 8, 1, 3 / 11),
        ("gpipe", 1, 4, 1, 0.0),
        ("interleaved-1f1b", 2, 4, 2, 1 / 9),  # bubble time (p-1)/v of m stage-slots: 0.5 / 4.5
        ("interleaved-1f1b", 4, 8, 2, 3 / 19),
        ("looped-bfs", 4, 8, 4, 3 / 35),
        ("interleaved-zb", 2, 4, 2, None),
        ("zbv", 2, 4, 2, None),
    ],
)
def test_formula_bubble(schedule: str, p: int, m: int, v: int, expected: float | None) -> None:
    got = formula_bubble(BY_NAME[schedule], p, m, v)
    assert got == (None if expected is None else pytest.approx(expected))


def test_fill_drain_bubble_and_ideal_speedup() -> None:
    assert [fill_drain_bubble(2, m) for m in (1, 4, 8)] == pytest.approx([1 / 2, 1 / 5, 1 / 9])
    assert [ideal_speedup(2, m) for m in (1, 4, 8)] == pytest.approx([1.0, 8 / 5, 16 / 9])
    assert ideal_speedup(4, 4) == pytest.approx(16 / 7)


@pytest.mark.parametrize(
    ("schedule", "p", "v", "m", "message"),
    [
        ("gpipe", 2, 2, 4, "needs exactly 1 stage(s) per rank, got --stages-per-rank 2"),
        ("1f1b", 4, 1, 2, "needs at least 4 micro-batches (4 ranks x 1 stages per rank), got --microbatches 2"),
        ("interleaved-1f1b", 2, 1, 4, "needs at least 2 stage(s) per rank, got --stages-per-rank 1"),
        ("interleaved-1f1b", 2, 2, 5, "--microbatches 5 is not a multiple of its 2 rounds (try 4)"),
        ("interleaved-zb", 4, 2, 10, None),  # 2 rounds of 5: fits
        ("interleaved-zb", 4, 2, 9, "--microbatches 9 is not a multiple of its 2 rounds (try 8)"),
        ("zbv", 2, 3, 4, "needs exactly 2 stage(s) per rank, got --stages-per-rank 3"),
        ("dualpipev", 2, 2, 2, "needs at least 4 micro-batches (2 ranks x 2 stages per rank), got --microbatches 2"),
        ("dualpipev", 2, 2, 4, None),
        ("looped-bfs", 2, 3, 1, None),
    ],
)
def test_check_schedule(schedule: str, p: int, v: int, m: int, message: str | None) -> None:
    if message is None:
        check_schedule(BY_NAME[schedule], p, v, m)
        return
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_schedule(BY_NAME[schedule], p, v, m)


def test_only_schedules_the_installed_torch_has_are_offered() -> None:
    old_torch = types.SimpleNamespace(ScheduleGPipe=object, Schedule1F1B=object, ScheduleInterleaved1F1B=object)
    assert available_schedules(old_torch) == ["gpipe", "1f1b", "interleaved-1f1b"]  # type: ignore[arg-type]
    assert available_schedules()[:3] == ["gpipe", "1f1b", "interleaved-1f1b"]
    with pytest.raises(ValueError, match="unknown schedule 'zbv'; this torch offers gpipe, 1f1b, interleaved-1f1b"):
        schedule_info("zbv", available_schedules(old_torch))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rank", "p", "v", "v_shape", "expected"),
    [(0, 2, 1, False, [0]), (1, 2, 2, False, [1, 3]), (2, 4, 3, False, [2, 6, 10]), (0, 2, 2, True, [0, 3]),
     (1, 2, 2, True, [1, 2]), (3, 4, 2, True, [3, 4])],
)
def test_stages_of_rank(rank: int, p: int, v: int, v_shape: bool, expected: list[int]) -> None:
    assert stages_of_rank(rank, p, v, v_shape) == expected


def test_clock_cycles_is_the_forward_wavefront() -> None:
    assert clock_cycles(3, 2) == [[(0, 0)], [(1, 0), (0, 1)], [(2, 0), (1, 1)], [(2, 1)]]
    assert clock_cycles(1, 3) == [[(0, 0)], [(0, 1)], [(0, 2)]]
    cycles = clock_cycles(5, 4)
    assert len(cycles) == 5 + 4 - 1
    assert sorted(pair for clock in cycles for pair in clock) == [(i, s) for i in range(5) for s in range(4)]


@pytest.mark.parametrize(
    ("batch", "m", "message"),
    [(8, 3, "global batch 8 is not divisible by 3 micro-batches"),
     (4, 8, "global batch 4 has fewer samples than --microbatches 8"), (8, 8, None), (8, 1, None)],
)
def test_check_microbatches(batch: int, m: int, message: str | None) -> None:
    if message is None:
        check_microbatches(batch, m)
    else:
        with pytest.raises(ValueError, match=message):
            check_microbatches(batch, m)


@pytest.mark.parametrize(
    ("text", "blocks", "stages", "expected"),
    [("3,2,2", 7, 3, [3, 2, 2]), ("even", 7, 3, None), ("time", 5, 5, None),
     ("3,2", 7, 3, "balance \\[3, 2\\] has 2 stages, but the run has 3"),
     ("3,2,1", 7, 3, "sums to 6, but the model has 7 blocks"),
     ("even", 5, 6, "cannot split 5 blocks into 6 stages"),
     ("fast", 5, 2, "neither even, params, time nor a list like 3,2,2")],
)
def test_explicit_balance(text: str, blocks: int, stages: int, expected: list[int] | str | None) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            explicit_balance(text, blocks, stages)
    else:
        assert explicit_balance(text, blocks, stages) == expected


def test_point_to_point_on_cuda_needs_nccl() -> None:
    with pytest.raises(ValueError, match="pipelines on cuda need the nccl backend: gloo cannot send CUDA tensors"):
        check_p2p_backend("cuda", "gloo")
    check_p2p_backend("cuda", "nccl")
    check_p2p_backend("cpu", "gloo")
