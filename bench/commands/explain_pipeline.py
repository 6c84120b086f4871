"""``python -m bench explain pp``: a pipeline schedule drawn rank by rank, with its bubble and its memory.

torchgpipe's and Megatron's papers draw a schedule as a grid of ranks against time; this prints that
grid for any schedule torch offers, from the same action tables the predictor replays
(strategies/action_tables.py: torch's own ``pipeline_order`` for the multi-stage schedules, the loops
GPipe and 1F1B run for the others), with equal stages and free transfers:

    rank 0  F0 F1 F2 F3 .  .  .  B0 B0 B1 B1 ...
    rank 1  .  F0 F1 F2 F3 B0 B0 B1 B1 ...

Everything printed is computed from the schedule's order; nothing is timed.
"""

from __future__ import annotations

from strategies.action_tables import Action, SimulatedSpan, action_table, simulate, simulated_bubble, unit_durations
from strategies.schedules import ScheduleInfo, formula_bubble, stages_of_rank
from strategies.timing import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

KINDS = {FORWARD: "forward (1 unit)", BACKWARD: "whole backward (2 units)",
         BACKWARD_INPUT: "input-gradient half of a backward (1 unit)",
         BACKWARD_WEIGHT: "weight-gradient half (1 unit)"}
MAX_COLUMNS = 200
"""Wider grids (many micro-batches) are cut on the right, saying so: the bubble is still the whole step's."""


def cell(action: Action, multi_stage: bool) -> str:
    """An action's label: kind and micro-batch, and the stage where a rank holds several."""
    return f"{action.kind}{action.microbatch}" + (f".{action.stage}" if multi_stage else "")


def grid_lines(spans: list[SimulatedSpan], multi_stage: bool) -> list[str]:
    """One line per rank, one cell per time unit: the action running then, or '.' where the rank idles."""
    width = max(len(cell(s.action, multi_stage)) for s in spans) + 1
    makespan = int(max(s.end for s in spans))
    units = min(makespan, MAX_COLUMNS // width)
    lines = [("time    " + "".join(str(t).ljust(width) for t in range(units))).rstrip()]
    for rank in sorted({s.rank for s in spans}):
        row = ["." for _ in range(makespan)]
        for s in spans:
            if s.rank == rank:
                for t in range(int(s.start), int(s.end)):
                    row[t] = cell(s.action, multi_stage)
        lines.append(f"rank {rank:<3}" + "".join(c.ljust(width) for c in row[:units]).rstrip())
    if units < makespan:
        lines.append(f"        (the first {units} of {makespan} time units)")
    return lines


def in_flight(spans: list[SimulatedSpan]) -> dict[int, int]:
    """Per rank, the most micro-batches whose activations it holds at once: a forward keeps them until the
    backward that frees them (a whole backward, or the weight half of a split one) has run."""
    peak: dict[int, int] = {}
    for rank in {s.rank for s in spans}:
        held = most = 0
        for s in sorted((s for s in spans if s.rank == rank), key=lambda s: s.start):
            held += {FORWARD: 1, BACKWARD: -1, BACKWARD_WEIGHT: -1}.get(s.action.kind, 0)
            most = max(most, held)
        peak[rank] = most
    return peak


def explain_pipeline(info: ScheduleInfo, ranks: int, stages_per_rank: int, microbatches: int) -> list[str]:
    """The whole explanation as lines of text (the schedule is checked by the caller)."""
    table = action_table(info, ranks, stages_per_rank, microbatches)
    spans = simulate(table, unit_durations)
    multi_stage = stages_per_rank > 1
    kinds = sorted({s.action.kind for s in spans}, key=list(KINDS).index)
    source = (f"torch.distributed.pipelining.{info.torch_class}'s own pipeline_order" if info.multi_stage
              else f"the loop torch.distributed.pipelining.{info.torch_class} runs")
    holds = ", ".join(f"rank {r} -> {'/'.join(map(str, stages_of_rank(r, ranks, stages_per_rank, info.v_shape)))}"
                      for r in range(ranks))
    lines = [
        f"Pipeline schedule {info.name}: {ranks} ranks x {stages_per_rank} stage(s) per rank = "
        f"{ranks * stages_per_rank} stages, {microbatches} micro-batches.",
        f"Stages held: {holds}.",
        f"Each rank's actions in order ({source}), equal stages and free transfers; a cell is "
        f"kind and micro-batch{' .stage' if multi_stage else ''}, '.' is idle: "
        + "; ".join(f"{k} = {KINDS[k]}" for k in kinds) + ".",
        "",
        *grid_lines(spans, multi_stage),
        "",
    ]
    bubble = simulated_bubble(spans)
    formula = formula_bubble(info, ranks, microbatches, stages_per_rank)
    if formula is None:
        said = "no textbook formula covers this schedule"
    elif abs(formula - bubble) < 5e-4:
        said = f"the textbook formula gives the same, {formula:.3f}"
    else:
        said = f"the textbook formula would say {formula:.3f}: its assumptions do not hold at these numbers"
    lines.append(f"Bubble (idle share of the step, averaged over ranks): {bubble:.3f}, from the order above; {said}.")
    peaks = in_flight(spans)
    lines.append("Activations held at once (micro-batch stages between their forward and the backward that frees "
                 "them): " + ", ".join(f"rank {r} {peaks[r]}" for r in sorted(peaks)) + ".")
    lines.append("A measured run adds real stage times and transfers: `bench run --strategy pp` records its own "
                 "timeline and bubble.")
    return lines
