"""The order each rank runs a schedule's compute in (its action table), and an event simulation of it.

A bubble formula holds for some schedules at some sizes: (p-1)/(m+p-1) for GPipe and 1F1B, the
same divided by v for interleaved ones when m is a multiple of p, nothing for zero-bubble ones.
Looped BFS with p = 2, v = 2, m = 1 shows the gap: the formula says 1/3, the schedule idles half:

    rank 0   F0 .  F2 .  .  .  .  B2 B2 .  .  B0 B0        F = forward (1), B = backward (2),
    rank 1   .  F1 .  F3 B3 B3 .  .  .  B1 B1 .  .         stage number shown; busy 6 of 12

So the theoretical bubble here is not a formula: it replays the schedule's own order with equal
durations and free communication. The multi-stage schedules (interleaved, looped, zero-bubble,
V-shaped) run exactly their ``pipeline_order``, so we take it from torch. GPipe and 1F1B run a
hand-written loop instead, and torch's ``pipeline_order`` for 1F1B, which only draws it, skips
the last rank's first forward (torch 2.11 to 2.14); their tables are written out below from the
loops they run.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strategies.schedules import ScheduleInfo, stages_of_rank
from strategies.timing import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

COMPUTE = (FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)


@dataclass(frozen=True)
class Action:
    """One compute action: ``kind`` (F, B, I or W) of micro-batch ``microbatch`` on stage ``stage``."""

    stage: int
    kind: str
    microbatch: int


ActionTable = dict[int, list[Action]]
"""Per rank, its compute actions in the order it runs them."""


@dataclass(frozen=True)
class SimulatedSpan:
    """An action placed in time by ``simulate``, in the measured timeline's units and fields."""

    rank: int
    action: Action
    start: float
    end: float


def unit_durations(action: Action) -> float:
    """Equal stages: a forward takes 1, a full backward 2, each half of a split backward 1."""
    return 2.0 if action.kind == BACKWARD else 1.0


def fill_drain_table(ranks: int, microbatches: int) -> ActionTable:
    """GPipe: every forward, then every backward, in micro-batch order."""
    return {r: [Action(r, FORWARD, i) for i in range(microbatches)]
            + [Action(r, BACKWARD, i) for i in range(microbatches)] for r in range(ranks)}


def one_f_one_b_table(ranks: int, microbatches: int) -> ActionTable:
    """1F1B as ``Schedule1F1B._step_microbatches`` runs it: rank r warms up with min(m, p - r)
    forwards, then alternates a backward and a forward, then drains the backwards."""
    table: ActionTable = {}
    for r in range(ranks):
        warmup = min(microbatches, ranks - r)
        actions = [Action(r, FORWARD, i) for i in range(warmup)]
        for i in range(microbatches):
            actions.append(Action(r, BACKWARD, i))
            if warmup + i < microbatches:
                actions.append(Action(r, FORWARD, warmup + i))
        table[r] = actions
    return table


def _fake_stage(stage: int, stages: int, rank: int, ranks: int) -> types.SimpleNamespace:
    """What a multi-stage schedule's constructor reads of a stage: enough to plan, nothing to run."""
    from torch import nn

    return types.SimpleNamespace(stage_index=stage, num_stages=stages, group_rank=rank, group_size=ranks,
                                 is_first=stage == 0, is_last=stage == stages - 1, submod=nn.Identity(),
                                 stage_index_to_group_rank=None)


def _flatten(order: dict[int, list]) -> ActionTable:
    """torch's ``_Action`` lists to ours: compute actions only, overlapped pairs (DualPipeV) in their order."""
    table: ActionTable = {}
    for rank, actions in order.items():
        flat: list[Action] = []
        pending = [a for a in actions if a is not None]
        while pending:
            action = pending.pop(0)
            if getattr(action, "sub_actions", None):
                pending[:0] = list(action.sub_actions)
                continue
            kind = str(getattr(action.computation_type, "value", action.computation_type))
            if kind in COMPUTE:
                flat.append(Action(action.stage_index, kind, action.microbatch_index))
        table[rank] = flat
    return table


def action_table(info: ScheduleInfo, ranks: int, stages_per_rank: int, microbatches: int) -> ActionTable:
    """The compute order of every rank under schedule ``info`` (validated with ``check_schedule`` first)."""
    if not info.multi_stage:
        return (one_f_one_b_table if info.name == "1f1b" else fill_drain_table)(ranks, microbatches)
    import torch.distributed.pipelining as pipelining

    stages = ranks * stages_per_rank
    mine = stages_of_rank(0, ranks, stages_per_rank, info.v_shape)
    schedule = getattr(pipelining, info.torch_class)(
        [_fake_stage(s, stages, 0, ranks) for s in mine], microbatches, loss_fn=lambda out, target: out
    )
    return _flatten(schedule.pipeline_order)


def dependencies(action: Action, last_stage: int) -> list[tuple[int, tuple[str, ...]]]:
    """The stage of each of this micro-batch's actions that must finish first, with the kinds any one of which will
    do: a backward waits for either kind of backward of the next stage (full, or its input half)."""
    s, kind = action.stage, action.kind
    if kind == FORWARD:
        return [(s - 1, (FORWARD,))] if s > 0 else []
    if kind == BACKWARD_WEIGHT:
        return [(s, (BACKWARD_INPUT,))]
    return [(s, (FORWARD,))] + ([(s + 1, (BACKWARD, BACKWARD_INPUT))] if s < last_stage else [])


def simulate(
    table: ActionTable,
    duration: Callable[[Action], float] = unit_durations,
    transfer: Callable[[Action], float] = lambda action: 0.0,
    idle: Callable[[Action], float] = lambda action: 0.0,
    begins: dict[int, float] | None = None,
) -> list[SimulatedSpan]:
    """Runs every rank's actions in its order, each as soon as its rank is free and its inputs have
    arrived (``transfer``: the time an action's input takes to cross from the neighbouring stage).
    ``idle``: what holds the rank before each action outside its span (the schedule's own work between
    actions, which a measured timeline, timing the stages' compute only, counts in its bubble). ``begins``: when each
    rank begins the step (0 where not given).

    Raises ValueError when the table cannot finish (an action waits on one that never runs first)."""
    stage_rank = {a.stage: r for r, actions in table.items() for a in actions}
    last_stage = max(stage_rank)
    done: dict[tuple[int, str, int], float] = {}
    free = {r: (begins or {}).get(r, 0.0) for r in table}
    cursor = dict.fromkeys(table, 0)
    spans: list[SimulatedSpan] = []
    while any(cursor[r] < len(table[r]) for r in table):
        progressed = False
        for r, actions in table.items():
            while cursor[r] < len(actions):
                action = actions[cursor[r]]
                ready = _ready_time(action, done, last_stage, stage_rank, r, transfer)
                if ready is None:
                    break
                start = max(free[r], ready) + idle(action)
                end = start + duration(action)
                spans.append(SimulatedSpan(r, action, start, end))
                done[(action.stage, action.kind, action.microbatch)] = end
                free[r], cursor[r], progressed = end, cursor[r] + 1, True
        if not progressed:
            stuck = {r: table[r][cursor[r]] for r in table if cursor[r] < len(table[r])}
            raise ValueError(f"the action table cannot finish: every rank waits ({stuck})")
    return spans


def _ready_time(
    action: Action, done: dict[tuple[int, str, int], float], last_stage: int, stage_rank: dict[int, int],
    rank: int, transfer: Callable[[Action], float],
) -> float | None:
    """When ``action``'s inputs are all there, or None while one has not run yet."""
    ready = 0.0
    for stage, kinds in dependencies(action, last_stage):
        finished = [done[key] for k in kinds if (key := (stage, k, action.microbatch)) in done]
        if not finished:
            return None
        crossing = transfer(action) if stage_rank[stage] != rank else 0.0
        ready = max(ready, min(finished) + crossing)
    return ready


def simulated_bubble(spans: list[SimulatedSpan]) -> float:
    """Idle fraction of the simulated step, averaged over ranks (as the measured bubble is)."""
    makespan = max(s.end for s in spans)  # from 0, where the step starts (a first span may start later)
    busy: dict[int, float] = {}
    for s in spans:
        busy[s.rank] = busy.get(s.rank, 0.0) + (s.end - s.start)
    return 1 - sum(busy.values()) / (len(busy) * makespan)


def staggered_bubble(spans: list[SimulatedSpan], start: dict[int, float]) -> float:
    """``simulated_bubble`` where rank r begins the step at ``start[r]``, as each rank times it: its own schedule from
    its own start to its last action, the step's the longest of those."""
    busy: dict[int, float] = {}
    ends: dict[int, float] = {}
    for s in spans:
        busy[s.rank] = busy.get(s.rank, 0.0) + (s.end - s.start)
        ends[s.rank] = max(ends.get(s.rank, 0.0), s.end)
    longest = max(ends[r] - start.get(r, 0.0) for r in ends)
    return 1 - sum(busy.values()) / (len(busy) * longest)


def theoretical_bubble(info: ScheduleInfo, ranks: int, microbatches: int, stages_per_rank: int = 1) -> float:
    """The idle fraction of schedule ``info`` with equal stages and free communication, from its own order."""
    if ranks == 1 and stages_per_rank == 1:
        return 0.0
    return simulated_bubble(simulate(action_table(info, ranks, stages_per_rank, microbatches)))


def ranks_at_work(spans: Sequence[SimulatedSpan], before: Callable[[Action], float] = lambda action: 0.0
                  ) -> dict[Action, float]:
    """How many ranks work on average while each span and the work ``before`` it on its rank run, itself included
    (1 where both are empty): work in a span, or before one (the schedule's own, between the actions: CPU work too).

    Counted in spans alone, a 1F1B step on 4 ranks of 2 cores came out short of the measured (the small mlp at m = 8
    by a mean 18.8% over nine target sweeps) while its ranks' processes used 14-32 ms of CPU a step outside their
    spans (process time against span time, 1F1B and GPipe at m = 8): the others' schedules slow a span too.

    One sweep over the spans' ends (the integral of the number at work, read at each span's start and end)
    rather than each span against every other: a plan prices thousands of long schedules."""
    starts = {s.action: s.start - before(s.action) for s in spans}
    change: dict[float, int] = {}
    for s in spans:
        if s.end > starts[s.action]:
            change[starts[s.action]] = change.get(starts[s.action], 0) + 1
            change[s.end] = change.get(s.end, 0) - 1
    integral: dict[float, float] = {}
    area, at_work, previous = 0.0, 0, 0.0
    for t in sorted(change):
        area += at_work * (t - previous)
        integral[t], at_work, previous = area, at_work + change[t], t
    return {s.action: (integral[s.end] - integral[starts[s.action]]) / (s.end - starts[s.action])
            if s.end > starts[s.action] else 1.0 for s in spans}
