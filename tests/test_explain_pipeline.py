"""``python -m bench explain pp`` (bench/commands/explain_pipeline.py): a schedule drawn rank by rank, its bubble
against the textbook formula, and the activations each rank holds."""

from __future__ import annotations

import pytest

from bench.cli import main
from bench.commands import explain_pipeline
from bench.commands.explain_pipeline import explain_pipeline as explain
from strategies.schedules import BY_NAME


def test_gpipe_is_drawn_as_every_forward_then_every_backward_with_the_formula_s_bubble() -> None:
    lines = explain(BY_NAME["gpipe"], 2, 1, 4)
    grid = lines[lines.index("") + 1:]
    assert grid[1] == "rank 0  F0 F1 F2 F3 .  .  .  B0 B0 B1 B1 B2 B2 B3 B3"
    assert grid[2] == "rank 1  .  F0 F1 F2 F3 B0 B0 B1 B1 B2 B2 B3 B3 .  ."
    # (p - 1) / (m + p - 1) = 1/5, and the drawn grid idles 3 of 15 units on each rank
    assert "Bubble (idle share of the step, averaged over ranks): 0.200" in "\n".join(lines)
    assert "the textbook formula gives the same, 0.200" in "\n".join(lines)


def test_where_the_formula_does_not_hold_the_drawn_order_says_so() -> None:
    # looped BFS, p = 2, v = 2, m = 1: the formula says 1/3, the schedule idles half (strategies/action_tables.py)
    text = "\n".join(explain(BY_NAME["looped-bfs"], 2, 2, 1))
    assert "0.500, from the order above; the textbook formula would say 0.333" in text
    assert "rank 0  F0.0 .    F0.2" in text  # a rank holding two stages names the stage


def test_1f1b_holds_fewer_micro_batches_than_gpipe() -> None:
    # GPipe keeps every micro-batch's activations until its backwards; 1F1B at most p - r on rank r
    def held(schedule: str) -> str:
        return next(line for line in explain(BY_NAME[schedule], 2, 1, 4) if line.startswith("Activations"))

    assert held("gpipe").endswith("rank 0 4, rank 1 4.")
    assert held("1f1b").endswith("rank 0 2, rank 1 1.")


def test_a_count_that_never_frees_fails_the_activations_check(monkeypatch: pytest.MonkeyPatch) -> None:
    never_freed = explain_pipeline.in_flight

    def broken(spans: list) -> dict[int, int]:  # counts forwards only, as if no backward freed anything
        return {r: sum(1 for s in spans if s.rank == r and s.action.kind == "F") for r in never_freed(spans)}

    monkeypatch.setattr(explain_pipeline, "in_flight", broken)
    held = next(line for line in explain(BY_NAME["1f1b"], 2, 1, 4) if line.startswith("Activations"))
    assert not held.endswith("rank 0 2, rank 1 1.")


def test_a_wide_grid_is_cut_and_says_so() -> None:
    lines = explain(BY_NAME["gpipe"], 4, 1, 64)
    assert lines[lines.index("") + 1 + 5] == "        (the first 50 of 201 time units)"
    assert all(len(line) <= 210 for line in lines if line.startswith("rank"))


def test_the_cli_takes_the_schedule_s_fewest_stages_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "pp", "--schedule", "interleaved-1f1b", "--microbatches", "4"]) == 0
    assert "2 ranks x 2 stage(s) per rank = 4 stages, 4 micro-batches" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [(["pp", "--schedule", "nope"], "unknown schedule 'nope'; this torch offers gpipe, 1f1b"),
     (["pp", "--schedule", "interleaved-1f1b", "--stages-per-rank", "1"],
      "schedule 'interleaved-1f1b' needs at least 2 stage(s) per rank, got --stages-per-rank 1"),
     (["pp", "--microbatches", "0"], "--microbatches must be at least 1, got 0"),
     (["pp", "--batch-size", "30"], "--batch-size is not read by pp (it reads --devices, --microbatches"),
     (["dp", "--schedule", "1f1b"], "--schedule is not read by dp (it reads --devices, --batch-size")],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"bench explain: error: {message}") and err.count("\n") == 1
