"""bench/experiments/grid.py: the sweep's plan, every point validated as `bench run` would, round by round."""

from __future__ import annotations

from pathlib import Path

from bench.experiments.grid import SweepConfig, plan, run_key
from bench.harness.config import RunConfig


def test_weak_scaling_grows_the_global_batch_and_strong_keeps_it(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    for scaling, expected in (("weak", [8, 16]), ("strong", [8, 8])):
        sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling=scaling)
        runs = [r for r in plan(sweep) if r.config.strategy == "ddp"]
        assert [r.config.run.batch_size for r in runs] == expected
        assert {r.config.measure.scaling for r in runs} == {scaling}


def test_plan_skips_what_cannot_run_and_says_why(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=3, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="strong")
    runs = {(r.config.strategy, r.config.run.devices): r for r in plan(sweep)}
    assert ("single", 2) not in runs  # the reference runs on one device only: not a point of the grid
    assert runs[("single", 1)].skip_reason is None
    assert "3 is not divisible by 2" in runs[("ddp", 2)].skip_reason


def test_repeats_run_round_by_round_each_with_its_own_key(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="strong",
                        repeats=3)
    runs = plan(sweep)
    order = [(r.config.measure.repeat, r.config.strategy, r.config.run.devices) for r in runs]
    grid = [("single", 1), ("ddp", 1), ("ddp", 2)]
    assert order == [(repeat, *point) for repeat in range(3) for point in grid]
    assert len({run_key(r.config.as_dict()) for r in runs}) == 9


def test_weak_scaling_plans_single_at_every_global_batch_so_speedups_compare_equal_work(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(1, 2), base=base, scaling="weak")
    singles = sorted(r.config.run.batch_size for r in plan(sweep) if r.config.strategy == "single")
    assert singles == [8, 16]


def test_a_strategy_with_no_point_in_the_sweep_gets_a_skipped_row_saying_why(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "hybrid"), models=("mlp",), devices=(1, 2), base=base, repeats=2)
    (hybrid,) = [r for r in plan(sweep) if r.config.strategy == "hybrid"]  # once, not per repeat
    assert hybrid.skip_reason == "hybrid needs at least 4 devices; this sweep's device counts are 1, 2"


def test_a_sweep_without_one_device_still_plans_single_as_every_speed_up_s_baseline(tmp_path: Path) -> None:
    base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"))
    sweep = SweepConfig(strategies=("single", "ddp"), models=("mlp",), devices=(2,), base=base)
    runs = [(r.config.strategy, r.config.run.devices, r.skip_reason) for r in plan(sweep)]
    assert runs == [("ddp", 2, None), ("single", 1, None)]


def test_one_sweep_runs_gpipe_1f1b_and_interleaved_1f1b_each_at_its_own_stages_per_rank(tmp_path: Path) -> None:
    def stages(**flags: object) -> dict[str, tuple[int, str | None]]:
        base = RunConfig.from_flags(preset="tiny", batch_size=8, out=str(tmp_path / "s.jsonl"), **flags)
        sweep = SweepConfig(strategies=("pp",), models=("mlp",), devices=(2,), base=base, microbatches=(4,),
                            schedules=("gpipe", "1f1b", "interleaved-1f1b"))
        return {r.config.pipeline.schedule: (r.config.pipeline.stages_per_rank, r.skip_reason) for r in plan(sweep)}

    assert stages() == {"gpipe": (1, None), "1f1b": (1, None), "interleaved-1f1b": (2, None)}
    # stages per rank the user set are kept, for every schedule: gpipe and 1f1b then say why they cannot
    chosen = stages(stages_per_rank=2)
    assert chosen["interleaved-1f1b"] == (2, None)
    assert chosen["gpipe"][0] == 2 and "stage" in chosen["gpipe"][1]


def test_hybrids_degrees_reach_hybrid_and_spare_single_and_its_baseline(tmp_path: Path) -> None:
    """`bench sweep --strategies single,hybrid --dp-shard 2 --tp 2` refused the whole sweep ("--dp-shard 2 is
    for hybrid, not single": the preset's batch was resolved under the flags as given)."""
    base = RunConfig.from_flags(preset="tiny", out=str(tmp_path / "s.jsonl"), dp_shard=2, tp=2)
    sweep = SweepConfig(strategies=("single", "hybrid"), models=("mlp",), devices=(4,), base=base, microbatches=(1,))
    runs = [(r.config.strategy, r.config.run.devices, r.config.mesh.dp_shard, r.config.mesh.tp, r.skip_reason)
            for r in plan(sweep)]
    assert runs == [("hybrid", 4, 2, 2, None), ("single", 1, None, None, None)]
