"""Predicted memory and bubbles scored against what the runs measured (reports/sections/prediction_scores.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.records import repeated
from tests.helpers.reports import built_report


def test_predicted_memory_and_bubbles_are_scored_against_what_the_runs_measured(tmp_path: Path) -> None:
    from tests.helpers.records import tracked

    measured = tracked(parameters=32, gradients=32, optimizer_state=32, total=128)
    predicted = {"parameters": 32 * 2**20, "gradients": 32 * 2**20, "optimizer_state": 32 * 2**20,
                 "activations": 16 * 2**20, "total": 112 * 2**20}  # 12.5% under the tracker's total
    ddp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_memory_by_kind": predicted})
           for r in repeated("ddp", 2, 90.0, memory_by_kind=measured)]
    pp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_bubble": 0.30})
          for r in repeated("pp", 2, 90.0, microbatches=4, measured_bubble_fraction=0.20)]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + ddp + pp)
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "total median 12.5%, largest 12.5% (ddp x2" in scores
    assert "parameters median 0.0%" in scores and "optimizer state median 0.0%" in scores
    assert "activations median" not in scores  # the tracker measured none: nothing to score it against
    assert "0 of 1 within 0.05" in scores  # 0.30 predicted against 0.20 measured
    assert md.index("## Appendix") < md.index("## Predicted memory and bubbles")


def test_memory_is_the_median_repeats_and_a_total_inside_its_repeats_range_says_so(tmp_path: Path) -> None:
    # FSDP's peak moves with when its collectives complete: ZeRO-3 on the small cnn at 4 ranks tracked 79.74, 93.25 and
    # 93.25 MiB over three repeats, and the report scored the first repeat's alone.
    from tests.helpers.records import tracked

    totals = [79.74, 93.25, 93.25]
    predicted = {"parameters": 10 * 2**20, "gradients": 10 * 2**20, "optimizer_state": 10 * 2**20,
                 "total": int(79.7 * 2**20)}
    runs = [dict(r, memory_by_kind=tracked(10, 10, 10, total),
                 prediction={"predicted_step_time_ms": 700.0, "predicted_memory_by_kind": predicted})
            for r, total in zip(repeated("fsdp", 2, 90.0), totals, strict=True)]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + runs)
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "93.2 / 79.7" in scores  # the median repeat's total, not the first's nor a mean
    assert "79.7-93.2" in scores  # the repeats' range
    assert "within 1% of the range its repeats tracked: 1 of 1" in scores
    # a prediction outside the range says so
    far = [dict(r, prediction={**r["prediction"], "predicted_memory_by_kind": {**predicted, "total": 60 * 2**20}})
           for r in runs]
    (tmp_path / "far").mkdir()
    md, _ = built_report(tmp_path / "far", repeated("single", 1, 100.0) + far)
    assert "within 1% of the range its repeats tracked: 0 of 1" in md


def test_each_pipelines_actions_are_scored_beside_its_bubble(tmp_path: Path) -> None:
    # the runs' actions took 0.75 of the time predicted for them while the bubble came out right: the compute missed
    def timeline(scale: float) -> list[dict[str, object]]:
        return [{"rank": r, "stage": r, "kind": k, "microbatch": 0, "start_ms": 0.0, "end_ms": d * scale}
                for r, k, d in ((0, "F", 4.0), (1, "F", 4.0), (1, "B", 8.0), (0, "B", 8.0))]

    pp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_bubble": 0.21,
                              "predicted_timeline": timeline(1.0)})
          for r in repeated("pp", 2, 90.0, microbatches=4, measured_bubble_fraction=0.20, timeline=timeline(0.75))]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + pp)
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "1 of 1 within 0.05" in scores
    assert "Their actions took a median 0.75 of the time PREDICTED for them" in scores
    assert "(0.75 to 0.75 over 1 configuration, each its repeats' median" in scores
    assert "| actions measured / predicted |" in scores


def test_no_actions_figure_where_no_run_carried_both_timelines(tmp_path: Path) -> None:
    pp = [dict(r, prediction={"predicted_step_time_ms": 700.0, "predicted_bubble": 0.21})
          for r in repeated("pp", 2, 90.0, microbatches=4, measured_bubble_fraction=0.20)]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + pp)
    assert "Their actions took" not in md and "actions measured / predicted" not in md


def test_a_bubble_is_read_against_the_range_its_repeats_measured(tmp_path: Path) -> None:
    # The transformer's hybrid interleaved m=8 at 4 ranks measured 0.269, 0.365 and 0.286 over three repeats of one
    # target sweep: the median alone hides that a rerun moves the measured bubble by 0.1.
    def runs(predicted: float) -> list[dict]:
        return [dict(r, strategy_fields={**r["strategy_fields"], "measured_bubble_fraction": bubble},
                     prediction={"predicted_step_time_ms": 700.0, "predicted_bubble": predicted})
                for r, bubble in zip(repeated("pp", 2, 90.0, microbatches=8), (0.269, 0.365, 0.286), strict=True)]

    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + runs(0.40))
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "0 of 1 within 0.05 of their repeats' median" in scores  # 0.40 against 0.286
    assert "1 of 1 within 0.05 of the bubble one of their repeats measured" in scores  # 0.365 + 0.05 reaches it
    assert "0.269-0.365" in scores and "lay a median 0.096 apart, at most 0.096 (pp (gpipe, m=8) x2" in scores
    # beyond every repeat's, it says so
    (tmp_path / "far").mkdir()
    md, _ = built_report(tmp_path / "far", repeated("single", 1, 100.0) + runs(0.464))
    assert "0 of 1 within 0.05 of the bubble one of their repeats measured" in md


def test_each_kind_is_also_read_against_the_repeat_nearest_its_prediction(tmp_path: Path) -> None:
    # ZeRO-3 on the small cnn at 4 ranks: one repeat peaked as predicted (18.5 MiB gathered), two as block 7's
    # all-gather buffer was still held (28.0): the median repeat's reads 34% off, the nearest repeat's 0%.
    from tests.helpers.records import tracked

    def memory(gathered: float) -> list[dict]:
        device = tracked(10, 10, 10, 30 + gathered)[0]
        return [{**device, "gathered_parameters": int(gathered * 2**20)}]

    predicted = {"parameters": 10 * 2**20, "gradients": 10 * 2**20, "optimizer_state": 10 * 2**20,
                 "gathered_parameters": int(18.5 * 2**20), "total": int(48.5 * 2**20)}
    runs = [dict(r, memory_by_kind=memory(gathered),
                 prediction={"predicted_step_time_ms": 700.0, "predicted_memory_by_kind": predicted})
            for r, gathered in zip(repeated("fsdp", 4, 90.0), (18.5, 28.0, 28.0), strict=True)]
    md, _ = built_report(tmp_path, repeated("single", 1, 100.0) + runs)
    scores = md.split("## Predicted memory and bubbles against measured", 1)[1]
    assert "gathered parameters median 33.9%, largest 33.9%" in scores  # 18.5 against the median repeat's 28.0
    nearest = "the largest |error|: parameters 0.0%, gradients 0.0%, optimizer state 0.0%, gathered parameters 0.0%"
    assert nearest in scores
    assert "error against the nearest repeat" not in scores  # summed up in the text, not a column
    # a prediction beyond every repeat's is off by as much against the nearest
    beyond = [dict(r, prediction={**r["prediction"], "predicted_memory_by_kind": {
        **predicted, "gathered_parameters": 14 * 2**20}}) for r in runs]
    (tmp_path / "beyond").mkdir()
    md, _ = built_report(tmp_path / "beyond", repeated("single", 1, 100.0) + beyond)
    assert "optimizer state 0.0%, gathered parameters 24.3%" in md  # 14 against 18.5
