"""strategies/pipeline_cost.py: pp's step replayed from its action table, as literal cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.predict.calibration import Calibration, Line
from bench.predict.costs import predict_memory, predict_step
from bench.predict.scenario import Scenario
from strategies.action_tables import theoretical_bubble
from strategies.schedules import available_schedules, fill_drain_bubble, schedule_info
from tests.helpers.calibrations import equal_blocks


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (2, 1)])
def test_pipelines_with_equal_stages_and_free_transfers_give_the_textbook_bubble(schedule: str, p: int, m: int) -> None:
    step = predict_step(equal_blocks(p), Scenario("pp", p, 8 * m, microbatches=m, schedule=schedule), 1)
    assert step.bubble == pytest.approx(fill_drain_bubble(p, m))
    assert step.step_ms == pytest.approx((m + p - 1) * 3.0)  # (m + p - 1) slots of F + B
    assert step.exposed_comm_ms == pytest.approx(step.step_ms - m * 3.0)


def test_1f1b_holds_fewer_micro_batches_than_gpipe() -> None:
    blocks = equal_blocks(2).blocks(1)
    gpipe = predict_memory(blocks, Scenario("pp", 2, 64, microbatches=8, schedule="gpipe"), 1)
    one_f_one_b = predict_memory(blocks, Scenario("pp", 2, 64, microbatches=8, schedule="1f1b"), 1)
    assert gpipe["activations"] == 8 * 8 * 10  # all 8 micro-batches of 8 samples, 10 bytes each
    assert one_f_one_b["activations"] == 2 * 8 * 10  # at most p - rank in flight on rank 0
    assert gpipe["parameters"] == one_f_one_b["parameters"] == 4 * 1000


def test_interleaving_divides_the_bubble_by_the_stages_per_rank() -> None:
    p, m, v = 2, 4, 2
    plain = predict_step(equal_blocks(p), Scenario("pp", p, 8 * m, microbatches=m, schedule="1f1b"), 1)
    looped = predict_step(equal_blocks(p * v), Scenario("pp", p, 8 * m, microbatches=m, schedule="interleaved-1f1b",
                                                        stages_per_rank=v), 1)

    def idle_over_busy(bubble: float | None) -> float:
        assert bubble is not None
        return bubble / (1 - bubble)

    # Idle time over busy time: (p - 1) / m for 1F1B, (p - 1) / (v m) interleaved.
    assert idle_over_busy(plain.bubble) == pytest.approx((p - 1) / m)
    assert idle_over_busy(looped.bubble) == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("schedule", ["interleaved-zb", "zbv"])
def test_zero_bubble_schedules_with_equal_input_and_weight_halves_leave_little_and_less_with_more_micro_batches(
    schedule: str,
) -> None:
    def bubble(m: int) -> float:  # the schedule's own: every rank starting the step together
        return theoretical_bubble(schedule_info(schedule, available_schedules()), 2, m, 2)

    # What torch's tables leave at p = 2 (warm-up and cool-down), a fraction of 1F1B's at the same m.
    assert bubble(8) < fill_drain_bubble(2, 8) / 5 and bubble(8) < bubble(4)


def test_zero_bubble_actions_take_the_measured_input_and_weight_gradients_and_say_when_they_are_guessed(
        tmp_path: Path) -> None:
    scenario = Scenario("pp", 2, 32, microbatches=4, schedule="zbv", stages_per_rank=2)
    guessed = predict_step(equal_blocks(4), scenario, 1)  # backward 2 ms per block, split unmeasured
    assert guessed.notes == ["I and W are taken as half a backward each (not measured)"]
    assert {(s.action.kind, round(s.end - s.start, 6)) for s in guessed.timeline
            if s.action.kind in "IW" and s.action.stage > 0} == {("I", 1.0), ("W", 1.0)}  # the first: no I
    base = equal_blocks(4)
    measured = dataclasses.replace(base, threads={t: dataclasses.replace(costs, blocks=[dataclasses.replace(
        b, backward_input_ms=Line(1.5, 0.0), backward_weight_ms=Line(0.5, 0.0)) for b in costs.blocks])
        for t, costs in base.threads.items()})
    split = predict_step(measured, scenario, 1)
    assert split.notes == []
    assert {(s.action.kind, round(s.end - s.start, 6)) for s in split.timeline
            if s.action.kind in "IW" and s.action.stage > 0} == {("I", 1.5), ("W", 0.5)}
    measured.save(tmp_path / "split.json")
    assert Calibration.load(tmp_path / "split.json") == measured  # the split survives the file
    gpipe = predict_step(measured, dataclasses.replace(scenario, schedule="gpipe", stages_per_rank=1), 1)
    assert gpipe.step_ms == predict_step(base, dataclasses.replace(scenario, schedule="gpipe",
                                                                        stages_per_rank=1), 1).step_ms


def test_an_action_computes_at_the_slowdown_of_the_ranks_at_work_beside_it() -> None:
    from strategies.action_tables import Action, SimulatedSpan, action_table, ranks_at_work, simulate
    from strategies.schedules import available_schedules, schedule_info

    alone = SimulatedSpan(0, Action(0, "F", 0), 0.0, 2.0)
    half_shared = SimulatedSpan(1, Action(1, "F", 0), 1.0, 3.0)
    assert ranks_at_work([alone]) == {alone.action: 1.0}
    assert ranks_at_work([alone, half_shared])[alone.action] == 1.5  # the other rank works during half of it
    # the schedule's own work before a span is work too, and is slowed with it: with 2 ms before the first ([-2, 2])
    # and 1 before the second ([0, 3]), the second works beside the first for 2 of its 3 ms (counted alone: half)
    before = {alone.action: 2.0, half_shared.action: 1.0}.__getitem__
    assert ranks_at_work([alone, half_shared], before)[alone.action] == pytest.approx((2 * 1 + 2 * 2) / 4)
    assert ranks_at_work([alone, half_shared], before)[half_shared.action] == pytest.approx((1 * 2 + 1 * 2 + 1) / 3)
    # on a real timeline, what each span overlaps of every other, summed directly
    spans = simulate(action_table(schedule_info("1f1b", available_schedules()), 3, 1, 5),
                     lambda a: 1.0 + 0.5 * a.stage + (a.kind == "B"), lambda a: 0.25)
    direct = {s.action: sum(max(0.0, min(s.end, o.end) - max(s.start, o.start)) for o in spans) / (s.end - s.start)
              for s in spans}
    assert ranks_at_work(spans) == pytest.approx(direct)
    calibration = dataclasses.replace(equal_blocks(2), slowdown={2: 1.5, 4: 3.0})
    assert calibration.slowdown_for(1.5) == pytest.approx(1.25)  # straight between 1 (alone) and 2
    assert calibration.slowdown_for(3) == pytest.approx(2.25) and calibration.slowdown_for(8) == pytest.approx(6.0)
    # Four ranks, each at work all the time (m much larger than p): the pipeline runs at the 4-process slowdown.
    busy = predict_step(dataclasses.replace(equal_blocks(4), slowdown={4: 2.0}),
                        Scenario("pp", 4, 8 * 64, microbatches=64, schedule="1f1b"), 1)
    free = predict_step(equal_blocks(4), Scenario("pp", 4, 8 * 64, microbatches=64, schedule="1f1b"), 1)
    assert 1.8 < busy.step_ms / free.step_ms < 2.0


def test_the_schedules_work_between_actions_runs_at_the_slowdown_its_action_meets() -> None:
    # Posting a receive and waking on it is the rank's own CPU work: on shared cores it is slowed as the actions
    # are, so a gap fitted alone grows where more ranks compute side by side (1F1B's steady state, m = 8).
    from strategies.cost_model import RuntimeOverheads

    p, m, between = 4, 8, 0.5
    runtime = RuntimeOverheads(pp_per_action=between, pp_idle_per_action=between)
    scenario = Scenario("pp", p, 8 * m, microbatches=m, schedule="1f1b")
    base = equal_blocks(p)
    free = dataclasses.replace(base, communication={4: base.communication[2]}).with_runtime(4, runtime)
    shared = dataclasses.replace(free, slowdown={2: 1.0, 4: 2.0})

    def gaps(timeline: list) -> list[float]:  # rank 0's forwards of the warm-up follow each other, never waiting
        forwards = sorted((s for s in timeline if s.rank == 0 and s.action.kind == "F"), key=lambda s: s.start)
        return [b.start - a.end for a, b in zip(forwards[:3], forwards[1:4], strict=True)]

    assert gaps(predict_step(free, scenario, 1).timeline) == pytest.approx([between] * 3)
    at_work = predict_step(shared, scenario, 1)
    slowed = gaps(at_work.timeline)
    assert slowed[0] < slowed[1] < slowed[2] and slowed[2] > 1.5 * between  # more ranks at work at each
    # each gap stretched by exactly the slowdown its action computes at (the action's span against its blocks')
    durations = [s.end - s.start for s in sorted((s for s in at_work.timeline if s.rank == 0 and s.action.kind == "F"),
                                                  key=lambda s: s.start)[1:4]]
    forward = 1.0  # rank 0 holds one block of equal_blocks' 1 ms forwards
    assert slowed == pytest.approx([between * d / forward for d in durations])


def test_the_residual_spent_between_actions_holds_the_rank_outside_their_spans() -> None:
    # As a measured timeline has it: its spans time the stages' compute only.
    from strategies.cost_model import RuntimeOverheads

    p, m, between = 2, 4, 0.5
    free = equal_blocks(p)
    scenario = Scenario("pp", p, 8 * m, microbatches=m, schedule="gpipe")
    inside = predict_step(free.with_runtime(2, RuntimeOverheads(pp_per_action=between)), scenario, 1)
    step = predict_step(free.with_runtime(2, RuntimeOverheads(pp_per_action=between, pp_idle_per_action=between)),
                        scenario, 1)
    assert sorted({round(s.end - s.start, 9) for s in step.timeline}) == [1.0, 2.0]  # F and B, no more
    # inside the spans, the residual is spread by compute: a pair's 2 x 0.5 ms goes a third to its F of 1 ms, two
    # thirds to its B of 2 ms (the same 0.5 ms on each: 1.5 and 2.5)
    assert sorted({round(s.end - s.start, 9) for s in inside.timeline}) == [round(4 / 3, 9), round(8 / 3, 9)]
    # GPipe's 2 m actions on the critical path's ranks, each started `between` late: 2 m + 2 of them
    assert step.step_ms == pytest.approx(inside.step_ms) == pytest.approx((m + p - 1) * 3.0 + (2 * m + 2) * between)
    assert step.bubble == pytest.approx(1 - m * 3.0 / step.step_ms)  # every rank computes m x 3 ms
    assert inside.bubble == pytest.approx(1 - m * 4.0 / step.step_ms)
    assert step.compute_ms == pytest.approx(inside.compute_ms)  # the breakdown keeps the residual where it was



def test_several_stages_a_rank_take_the_interleaved_reference_runs_residual_where_it_ran() -> None:
    # The one-stage reference runs' residual spreads what they miss over their actions; a schedule of several
    # stages a rank has more, smaller actions, and takes the residual an interleaved reference run fitted instead.
    from strategies.cost_model import RuntimeOverheads

    p, m = 2, 4
    free = equal_blocks(2 * p)
    interleaved = Scenario("pp", p, 8 * m, microbatches=m, schedule="interleaved-1f1b", stages_per_rank=2)
    one_stage = Scenario("pp", p, 8 * m, microbatches=m, schedule="1f1b")
    pp_only = free.with_runtime(2, RuntimeOverheads(pp_per_action=-0.5))
    both = free.with_runtime(2, RuntimeOverheads(pp_per_action=-0.5, pp_interleaved_per_action=0.25))

    def durations(calibration: Calibration, scenario: Scenario) -> set[float]:
        return {round(s.end - s.start, 9) for s in predict_step(calibration, scenario, 1).timeline}

    # 1 ms forwards and 2 ms backwards, pp's -0.5 an action spread by their compute: a third of a pair's -1 to F
    assert durations(pp_only, interleaved) == {round(2 / 3, 9), round(4 / 3, 9)}
    assert durations(both, interleaved) == {round(1 + 0.5 / 3, 9), round(2 + 1 / 3, 9)}
    assert durations(both, one_stage) == durations(pp_only, one_stage) == {round(2 - 1 / 3, 9), round(4 - 2 / 3, 9)}
    with_gap = free.with_runtime(2, RuntimeOverheads(pp_interleaved_per_action=0.25,
                                                     pp_interleaved_idle_per_action=0.25))
    assert durations(with_gap, interleaved) == {1.0, 2.0}  # all of it between the actions


@pytest.mark.parametrize(("m", "replicas"), [(8, 1), (4, 1), (4, 2)])
def test_the_per_action_residual_is_read_where_the_reference_runs_micro_batch_is_the_runs(m: int,
                                                                                           replicas: int) -> None:
    # The reference runs (4 micro-batches of one pipeline) fitted 2 ms an action at a global batch of 8 and none at
    # 96: a line in their global batch. An action of 8 samples (64 in 8 micro-batches) pays what the reference's
    # actions of 8 samples paid (at its global batch 32), not the residual at 64; one of 16 (64 in 4, or each of 2
    # replicas' 64 in 4) what it paid at 64, not at the hybrid's 128.
    from strategies.cost_model import REFERENCE_MICROBATCHES, RuntimeOverheads

    ranks = 2 * replicas
    equal = equal_blocks(4)
    free = dataclasses.replace(equal, communication={ranks: equal.communication[2]})
    line = free.with_runtime_line(ranks, {8: RuntimeOverheads(pp_per_action=2.0),
                                          96: RuntimeOverheads(pp_per_action=0.0)})
    scenario = (Scenario("pp", ranks, 64, microbatches=m, schedule="gpipe") if replicas == 1 else
                Scenario("hybrid", ranks, 128, microbatches=m, schedule="gpipe", dp=2, pp=2))
    at = 64 // m * REFERENCE_MICROBATCHES
    fixed = free.with_runtime(ranks, RuntimeOverheads(pp_per_action=2.0 * (96 - at) / 88))
    assert predict_step(line, scenario, 1).step_ms == pytest.approx(predict_step(fixed, scenario, 1).step_ms)


def test_an_interleaved_action_reads_the_residual_at_its_share_of_a_stages_work() -> None:
    # The reference runs' actions each compute a rank's whole stage; with 2 stages a rank an action computes half of
    # that: the residual's part that grows with the work is read at half the samples (64 in 4 micro-batches of 16,
    # halves of 8: the reference's global batch 32), its part per action at the line's start.
    from strategies.cost_model import RuntimeOverheads

    equal = equal_blocks(4)
    line = equal.with_runtime_line(2, {8: RuntimeOverheads(pp_per_action=2.0), 96: RuntimeOverheads(pp_per_action=0.0)})
    scenario = Scenario("pp", 2, 64, microbatches=4, schedule="interleaved-1f1b", stages_per_rank=2)
    fixed = equal.with_runtime(2, RuntimeOverheads(pp_per_action=2.0 * (96 - 32) / 88))
    assert predict_step(line, scenario, 1).step_ms == pytest.approx(predict_step(fixed, scenario, 1).step_ms)
    at_the_micro_batch = equal.with_runtime(2, RuntimeOverheads(pp_per_action=2.0 * (96 - 64) / 88))
    assert predict_step(line, scenario, 1).step_ms > predict_step(at_the_micro_batch, scenario, 1).step_ms


def test_each_rank_steps_its_optimizer_as_its_own_part_of_the_schedule_ends() -> None:
    # Under GPipe the last stage's backwards come first: its update runs while the first stage drains. The small
    # cnn's last stage holds 40 of its 42 MiB of weights; its update after the schedule put 5 ms on every 2-rank
    # step that the runs hid, and the per-action residuals fitted on them came out below zero.
    from bench.predict.calibration import BlockCost, ComputeCosts

    base = equal_blocks(2)
    light, heavy = (BlockCost(Line(1.0, 0.0), Line(2.0, 0.0), n, 100.0, 10.0) for n in (10, 1000))
    per_parameter = 1.5 / 1000  # the heavy stage's update: 1.5 ms, less than the one backward it drains before
    costs = ComputeCosts([light, heavy], per_parameter)
    calibration = dataclasses.replace(base, threads={t: costs for t in base.threads})
    step = predict_step(calibration, Scenario("pp", 2, 8, microbatches=4, schedule="gpipe"), 1)
    makespan = max(s.end for s in step.timeline)
    last_stage_done = max(s.end for s in step.timeline if s.rank == 1)
    assert makespan - last_stage_done == pytest.approx(2.0)  # the first stage's last backward
    assert step.update_ms == pytest.approx(10 * per_parameter)  # only the first stage's, after the makespan
    assert step.step_ms == pytest.approx(makespan + 10 * per_parameter)


def test_a_zero_bubble_schedules_first_stage_runs_its_whole_backward_as_its_weights_gradient() -> None:
    # Its input is the batch, which takes no gradient: torch's I computes nothing there and W the whole backward
    # (measured: the transformer's first stage under zbv, m=8 on 4 ranks, I 0.4 ms a step against W's 91).
    step = predict_step(equal_blocks(4), Scenario("pp", 2, 8, microbatches=4, schedule="zbv", stages_per_rank=2), 1)
    first = [s for s in step.timeline if s.action.stage == 0]
    inputs = [s.end - s.start for s in first if s.action.kind == "I"]
    weights = [s.end - s.start for s in first if s.action.kind == "W"]
    assert inputs and weights and max(inputs) == pytest.approx(0.0) and min(weights) == pytest.approx(2.0)
    later = [s.end - s.start for s in step.timeline if s.action.stage == 1 and s.action.kind == "I"]
    assert later and min(later) == pytest.approx(1.0)  # the others' backward halves (equal_blocks has no split)


def test_the_bubble_is_measured_from_each_ranks_own_start_which_its_own_update_sets() -> None:
    # No barrier holds the ranks together between steps: a rank begins the next step once its own update is done.
    # Measured (hybrid dp 2 x pp 2, the small cnn): the first stage, with little to update and average, began each
    # step 64 ms before the second and idled that long inside its schedule; started together, the bubble came out
    # 0.1 short of the measured.
    from bench.predict.calibration import BlockCost, ComputeCosts
    from strategies.action_tables import simulated_bubble

    base = equal_blocks(2)
    light, heavy = (BlockCost(Line(1.0, 0.0), Line(2.0, 0.0), n, 100.0, 10.0) for n in (10, 1000))
    costs = ComputeCosts([light, heavy], 0.05)  # updates of 0.5 ms (first stage) and 50 ms (second)
    calibration = dataclasses.replace(base, threads={t: costs for t in base.threads})
    step = predict_step(calibration, Scenario("pp", 2, 8, microbatches=4, schedule="gpipe"), 1)
    assert simulated_bubble(step.timeline) == pytest.approx(0.2)  # the timeline, started together: GPipe's 1/5
    # The second stage ends at 13 ms and updates to 63, the first ends at 15 and updates to 15.5: the first begins
    # 47.5 ms earlier, runs its forwards, and waits for the second's first backward (at 53.5), ending at 61.5. Each
    # rank busy 12 ms of the longest rank's 61.5.
    assert step.bubble == pytest.approx(1 - 24 / (2 * 61.5))


def test_the_interleaved_residual_is_read_where_its_reference_runs_actions_computed_as_much() -> None:
    # Its reference run has two stages a rank, as interleaved-1f1b at v = 2 has: an action of 8 samples pays what the
    # reference's actions of 8 samples paid (at its global batch 32), not what pp's one-stage line reads (at 16).
    from strategies.cost_model import RuntimeOverheads

    free = equal_blocks(4)
    line = free.with_runtime_line(2, {8: RuntimeOverheads(pp_interleaved_per_action=2.0),
                                      96: RuntimeOverheads(pp_interleaved_per_action=0.0)})
    scenario = Scenario("pp", 2, 64, microbatches=8, schedule="interleaved-1f1b", stages_per_rank=2)
    fixed = free.with_runtime(2, RuntimeOverheads(pp_interleaved_per_action=2.0 * (96 - 32) / 88))
    assert predict_step(line, scenario, 1).step_ms == pytest.approx(predict_step(fixed, scenario, 1).step_ms)


def test_a_pipelines_ranks_beyond_the_cores_compute_at_the_time_shared_slowdown() -> None:
    # 4 ranks on 2 cores, every rank at work all the time (m much larger than p): 2 ranks a core, each at the
    # 2-process slowdown twice over, whatever 4 processes side by side for a second measured beyond that
    scenario = Scenario("pp", 4, 8 * 64, microbatches=64, schedule="1f1b")

    def step_ms(slowdown: dict[int, float], machine: dict[str, object]) -> float:
        return predict_step(dataclasses.replace(equal_blocks(4), slowdown=slowdown, machine=machine), scenario,
                            1).step_ms

    two_cores = {"hostname": "here", "torch": "2.x", "cpu_cores": 2}
    # (the iterations start from every rank at work at the measured slowdown, and go half way a round)
    assert step_ms({2: 1.0, 4: 3.0}, two_cores) == pytest.approx(step_ms({2: 1.0, 4: 2.0}, two_cores), rel=0.005)
    assert step_ms({2: 1.0, 4: 3.0}, {"hostname": "here", "torch": "2.x"}) > 1.4 * step_ms({2: 1.0, 4: 2.0}, two_cores)
