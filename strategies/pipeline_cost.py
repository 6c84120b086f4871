"""What a pipeline's step costs and what its stages hold: pp's cost model (hybrid's builds on it:
strategies/hybrid_cost.py); which blocks a stage holds and the fullest rank's memory are strategies/stage_split.py's.

The schedule's own action table (strategies/action_tables.py) is replayed with the stages' calibrated F
and B times (I and W half a B each) and transfers of the stage's output. Ranks idle in the bubble leave the
cores to the others on emulated devices, so each action computes at the slowdown of the ranks at work beside it,
and so does the schedule's own work before it, which counts among them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from strategies.action_tables import (
    Action,
    ActionTable,
    SimulatedSpan,
    action_table,
    ranks_at_work,
    simulate,
    staggered_bubble,
)
from strategies.cost_model import (
    FP32,
    REFERENCE_MICROBATCHES,
    BlockCosts,
    CostModel,
    CostSource,
    Scenario,
    StepPrediction,
    own_overhead,
    split_pass,
    threads_per_process,
    whole_pass,
)
from strategies.schedules import available_schedules, schedule_info
from strategies.stage_split import largest_stage, stage_blocks
from strategies.timing import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

PIPELINE_ITERATIONS = 8
"""Rounds of a pipeline's concurrency and its slowdown. On the 2-core VM's calibrations (mlp and
transformer small; pp GPipe and 1F1B and dp x pp on 4 ranks) 8 rounds left the step within 0.3% of
where 11 did."""


STAGGER_ROUNDS = 3
"""Rounds of ``PipelineCost._staggered_bubble``'s starts and ends."""
PP_IDLE = "pp_idle_per_action"
"""The milliseconds of pp's per-action residual a rank spends between its actions (the schedule's own work: posting
receives, waking on them), at least zero; the rest of the residual is inside the actions, below zero where they run
quicker than their blocks timed alone."""
INTERLEAVED, INTERLEAVED_IDLE = "pp_interleaved_per_action", "pp_interleaved_idle_per_action"
"""The two terms above as a reference run of several stages a rank fits them (``INTERLEAVED_REFERENCE``). From the
one-stage runs, the small cnn's interleaved-1f1b at 2 ranks came out 18-33% short in three target sweeps in a row:
the one-stage residual was -1.9 and -3.2 ms an action in two (its 512-channel blocks' backward timed longer than
in the runs, spread over every action: interleaved has twice the actions); in the third (+0.5 ms) the second rank's
two weight-heavy stages ran slower beside each other than anything in a one-stage run does."""
INTERLEAVED_REFERENCE: dict[str, int | str] = {"schedule": "interleaved-1f1b", "stages_per_rank": 2}  # its options


class PipelineCost(CostModel):
    """pp: one pipeline over every device, its schedule replayed action by action."""

    residual = "pp_per_action"
    idle_residual: str | None = PP_IDLE

    def replicas(self, scenario: Scenario) -> int:
        """Pipelines side by side (hybrid's dp degree)."""
        return 1

    def reference_options(self, ranks: int, microbatches: int) -> dict[str, int] | None:
        return {"microbatches": microbatches}

    def reference_variants(self, ranks: int, microbatches: int) -> dict[str, dict[str, int | str]]:
        return {"interleaved": {"microbatches": microbatches, **INTERLEAVED_REFERENCE}}

    def fitted_terms(self, scenario: Scenario) -> tuple[str | None, str | None]:
        return (INTERLEAVED, INTERLEAVED_IDLE) if scenario.stages_per_rank > 1 else (self.residual, self.idle_residual)

    @staticmethod
    def action_terms(costs: CostSource, ranks: int, global_batch: float, stages_per_rank: int) -> tuple[float, float]:
        """The per-action residual and its part between the actions, the interleaved reference run's for several stages
        a rank where it ran, else pp's, each read where its reference's actions computed what this run's do."""
        if stages_per_rank > 1:
            interleaved = costs.runtime_for(ranks, global_batch * int(INTERLEAVED_REFERENCE["stages_per_rank"])
                                            / stages_per_rank)
            if INTERLEAVED in interleaved:
                return interleaved[INTERLEAVED], interleaved[INTERLEAVED_IDLE]
        runtime = costs.runtime_for(ranks, global_batch / stages_per_rank)
        return runtime[PipelineCost.residual], runtime[PP_IDLE]

    def batch_share(self, scenario: Scenario) -> float:
        return 1 / self.replicas(scenario)

    def tensor_parallel(self, scenario: Scenario) -> int:
        """Ranks each stage's layers are split over (hybrid's tp degree)."""
        return 1

    def compute_share(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario,
                      samples: float) -> float:
        """The share of blocks ``ids``' compute one rank of their stage does (hybrid's tp divides some)."""
        return 1.0

    def action_communication_ms(self, costs: CostSource, scenario: Scenario, blocks: Sequence[BlockCosts],
                                ids: Sequence[int], samples: float) -> tuple[float, float]:
        """The collectives inside one forward and one backward action of the stage holding blocks ``ids``
        (hybrid's tp all-reduces and FSDP all-gathers); none in a plain pipeline."""
        return 0.0, 0.0

    def local_parameters(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> float:
        """The parameters of blocks ``ids`` one rank holds between steps (all of them in a plain pipeline)."""
        return sum(blocks[i].parameters for i in ids)

    def gathered(self, blocks: Sequence[BlockCosts], ids: Sequence[int], scenario: Scenario) -> dict[str, float]:
        """Extra memory kinds (``by_kind``'s keywords) a rank holding blocks ``ids`` has at its peak."""
        return {}

    def runtime_units(self, scenario: Scenario, blocks: int) -> int:
        # F and B of each micro-batch on each of a rank's v stages: 2 (m v + p - 1) clock cycles' actions on the
        # longest rank
        ranks = scenario.devices // self.replicas(scenario)
        return 2 * (scenario.microbatches * scenario.stages_per_rank + ranks - 1)

    def memory(self, blocks: Sequence[BlockCosts], scenario: Scenario, states: int,
               gathered_bytes: int = FP32) -> dict[str, int]:
        return largest_stage(blocks, scenario, states, self.replicas(scenario), scenario.schedule == "gpipe", self)

    def step(self, costs: CostSource, scenario: Scenario, states: int) -> StepPrediction:
        replicas = self.replicas(scenario)
        ranks = scenario.devices // (replicas * self.tensor_parallel(scenario))
        m, v = scenario.microbatches, scenario.stages_per_rank
        threads = scenario.threads or threads_per_process(scenario.devices)
        blocks, all_at_work = costs.blocks(threads), costs.slowdown_for(scenario.devices)
        samples = scenario.global_batch / replicas / m
        parts = stage_blocks(blocks, scenario.balance, ranks * v, samples)
        shares = [self.compute_share(blocks, part, scenario, samples) for part in parts]
        times = [tuple(t * share for t in whole_pass(blocks, part, samples))
                 for part, share in zip(parts, shares, strict=True)]
        splits = [None if split is None else tuple(t * share for t in split)
                  for split, share in zip((split_pass(blocks, part, samples) for part in parts), shares, strict=True)]
        collectives = [self.action_communication_ms(costs, scenario, blocks, part, samples) for part in parts]
        # Stage s runs on pipeline rank s % ranks; replica r's pipeline holds global ranks r*ranks ..
        # r*ranks+ranks-1, each the first of its tp group (strategies/mesh.py: pp inside dp, tp innermost). A
        # boundary costs the slowest replica's crossing.
        tp = self.tensor_parallel(scenario)
        sends = [max(costs.transfer_ms(blocks[part[-1]].output_bytes_per_sample * samples,
                                       (r * ranks + s % ranks) * tp, (r * ranks + (s + 1) % ranks) * tp,
                                       scenario.devices)
                     for r in range(replicas)) for s, part in enumerate(parts)]
        # An action's residual is fitted per action of the reference runs (REFERENCE_MICROBATCHES micro-batches of
        # one pipeline), on a line in their global batch: read where their micro-batch is this run's. Read at this
        # run's global batch, m = 8 took the residual of micro-batches twice this run's: the target sweep's
        # pipelines came out a median 10.3% off (largest 35.6%), 8.4% (29.9%) read so (re-predicted, unscaled).
        # A reference action computes its rank's stage (half of it, interleaved's); with v stages a rank, a v-th: the
        # residual's part that grows with the work is read at that share of the samples (its part per action: the
        # line's start). Read at the micro-batch, the twelfth sweep's cnn interleaved x2 came out 55% short, 47% so.
        per_action, idle = self.action_terms(costs, scenario.devices, samples * REFERENCE_MICROBATCHES, v)
        # of which the rank spends this much between its actions, outside their spans (into the bubble), whatever
        # the sign of the rest: on the small cnn at 2 ranks the actions ran quicker than their blocks timed alone
        # (a residual of -0.09 ms) while the ranks still waited between them; capped at the residual, the gaps
        # came out nil and the two-stage schedules' idle time half the measured (docs/predictor.md)
        between = max(0.0, idle)
        slows: dict[Action, float] = {}

        def gap(action: Action) -> float:
            # The schedule's work before an action (posting its receives, waking on them) is the rank's own CPU
            # work: on shared cores it runs at the slowdown the action meets, as the action does. Taken as a
            # fixed delay, it was fitted on GPipe's fill and drain (few ranks at work at once) and came out short
            # where more ranks compute side by side (1F1B, interleaved, m = 8): re-predicted from the two target
            # sweeps' calibrations (residuals solved exactly either way), the pipelines' median 4.3% -> 3.9% and
            # 7.8% -> 7.2%, bubbles within 0.05 27 -> 35 and 20 -> 26 of 52 (docs/predictor.md).
            return between * slows.get(action, all_at_work)

        def compute(action: Action) -> float:  # the action's blocks as timed alone
            forward, backward = times[action.stage]
            input_grad, weight_grad = splits[action.stage] or (backward / 2, backward / 2)
            if action.stage == 0:  # its input is the batch: torch's I there computes nothing, its W the whole
                input_grad, weight_grad = 0.0, backward  # backward (transformer zbv m=8 x4: I 0.4 ms of 92)
            return {FORWARD: forward, BACKWARD: backward, BACKWARD_INPUT: input_grad,
                    BACKWARD_WEIGHT: weight_grad}[action.kind]

        table = action_table(schedule_info(scenario.schedule, available_schedules()), ranks, v, m)
        # The residual's part inside the spans, spread over the actions by their compute (a slowdown beyond the
        # modelled one), not the same on each: a stage that computes more pays more of it. The stages' measured
        # busy time said so (the small mlp's four stages at m = 8: its first stage's ran longer, its last's shorter,
        # than an even share predicted); re-fitted from the four target sweeps whose calibrations ran the interleaved
        # reference, bubbles within 0.05 went 45 -> 47, 46 -> 48, 42 -> 43 and 46 -> 48 of 52 (docs/predictor.md).
        actions = [action for order in table.values() for action in order]
        work = sum(compute(action) for action in actions)
        inside = (per_action - between) * len(actions) / work if work > 0 else 0.0

        def duration(action: Action) -> float:
            # the stage's own collectives: the forward's before it, the backward's with its input gradient
            forward_comm, backward_comm = collectives[action.stage]
            comm = {FORWARD: forward_comm, BACKWARD: backward_comm, BACKWARD_INPUT: backward_comm}
            return max(0.0, compute(action) * (slows.get(action, all_at_work) + inside) + comm.get(action.kind, 0.0))

        def transfer(action: Action) -> float:  # what crosses into this action from its neighbouring stage
            return sends[action.stage - 1] if action.kind == FORWARD else sends[action.stage]

        spans = simulate(table, duration, transfer, gap)
        # Each action computes at the slowdown of the ranks at work beside it (over every replica), found by
        # iterating from all of them at work (each round goes half way: a full step swings between fewer and
        # more actions side by side). Beyond the cores, as they take turns on them (``action_slowdown``): at the
        # slowdown of processes computing side by side for a second, the 4-rank pipelines at m = 8 came out long
        # (the small mlp's GPipe +8.1%, its dp x pp 1F1B +6.5%: median over 21 target sweeps re-predicted, their
        # residuals fitted again), +5.6% and +2.0% so; over all their pipelines, past 15% 157 -> 145 of 1092.
        for _ in range(PIPELINE_ITERATIONS if all_at_work != 1.0 else 0):
            beside = ranks_at_work(spans, before=gap)
            slows = {s.action: (slows.get(s.action, all_at_work) + costs.action_slowdown(replicas * beside[s.action]))
                     / 2 for s in spans}
            spans = simulate(table, duration, transfer, gap)
        makespan = max(s.end for s in spans)
        busy = max(sum(s.end - s.start + gap(s.action) for s in spans if s.rank == r) for r in table)
        # the blocks of every stage pipeline rank r holds (stage s runs on rank s % ranks)
        held = [[i for p in range(r, ranks * v, ranks) for i in parts[p]] for r in range(ranks)]
        held_parameters = [self.local_parameters(blocks, ids, scenario) for ids in held]
        stage_parameters = max(held_parameters)
        # Each rank steps its optimizer once its own last action is done, while the others drain: the step
        # ends with the last rank's update, not with the largest update after the last action. Taken so, the
        # small cnn's last stage (40 of its 42 MiB of weights, done first under GPipe and 1F1B) put 5 ms after
        # every 2-rank step that the runs hid, and the per-action residuals fitted on them came out below zero.
        ends = [0.0] * ranks
        for s in spans:  # one pass: a plan prices thousands of long schedules
            ends[s.rank] = max(ends[s.rank], s.end)
        finish = max(end + costs.optimizer_ms(threads, parameters) * all_at_work
                     for end, parameters in zip(ends, held_parameters, strict=True))
        update = finish - makespan
        # Idle time inside the schedule is the bubble (and waiting on transfers); the replicas' gradient
        # all-reduce runs after it, exposed.
        averaging = self.averaging_ms(costs, scenario, stage_parameters, replicas)
        # the timeline (and the step) as the ranks start it together; the bubble as they measure it
        bubble = self._staggered_bubble(table, spans, simulate_from=lambda start: simulate(
            table, duration, transfer, gap, start), tails=[
            costs.optimizer_ms(threads, p) * all_at_work + self.averaging_ms(costs, scenario, p, replicas)
            for p in held_parameters])
        split = any(s.action.kind == BACKWARD_WEIGHT for s in spans)
        notes = ["I and W are taken as half a backward each (not measured)"] if split and None in splits else []
        overhead = own_overhead(costs, threads, samples * m) * all_at_work  # the step's own, once per schedule
        overhead += max(self.runtime_per_step_ms(costs, scenario, ids) for ids in held)
        return StepPrediction(makespan + averaging + update + overhead, busy, makespan - busy + averaging, update,
                              bubble, spans, notes)

    @staticmethod
    def _staggered_bubble(table: ActionTable, spans: list[SimulatedSpan],
                          simulate_from: Callable[[dict[int, float]], list[SimulatedSpan]], tails: Sequence[float]
                          ) -> float:
        """The bubble as the ranks run and measure it, each from its own start (no barrier between steps
        holds them together): a rank begins a step once its own tail of the last (its stage's averaging over the
        replicas, then its update) is done, so one with a shorter tail begins early and waits inside the schedule
        for the others; in a balanced schedule, one that ends early begins the next step early.

        Measured (hybrid dp 2 x pp 2 on the small cnn, GPipe m = 4): the first stage, its gradients 2.7 MB against
        the second's 42 MB, began each step 64 ms before the second and idled that long for its first input;
        started together, its bubble came out 0.1 short (0.39 predicted, 0.50 measured). Re-fitted from the records
        of eight target sweeps, bubbles within 0.05 of the measured went 37 -> 39, 34 -> 37, 41 -> 47, 35 -> 35
        (mean miss 0.045 -> 0.037), 40 -> 48, 42 -> 48, 41 -> 44 and 38 -> 42 of 52. Found in ``STAGGER_ROUNDS``
        rounds of starts and ends."""
        start = dict.fromkeys(table, 0.0)
        for _ in range(STAGGER_ROUNDS):
            ends = dict.fromkeys(table, 0.0)
            for s in spans:
                ends[s.rank] = max(ends[s.rank], s.end)
            cycle = {r: ends[r] + tails[r] for r in table}
            first = min(cycle.values())
            start = {r: cycle[r] - first for r in table}
            spans = simulate_from(start)
        return staggered_bubble(spans, start)

    def averaging_ms(self, costs: CostSource, scenario: Scenario, stage_parameters: float, replicas: int) -> float:
        """What the replicas' gradient averaging adds after the schedule (none for one pipeline)."""
        return 0.0

    def runtime_per_step_ms(self, costs: CostSource, scenario: Scenario, ids: Sequence[int]) -> float:
        """The runtime terms a rank holding blocks ``ids`` pays once a step, beyond its actions' (none for pp)."""
        return 0.0

