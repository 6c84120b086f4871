"""A pipeline run's actions against the ones its prediction replayed: which half of a step's error is the actions'.

A pipelined step's predicted time is its actions (each stage's calibrated blocks at the slowdown of the ranks beside
it, plus the per-action residual) and what falls between them (the schedule's waits, the bubble). Its error alone does
not say which missed. In the seventeenth target sweep (docs/predictor.md) the small cnn's 2-rank 1F1B at m = 8 was
predicted 39% long; its second stage's backwards ran 22-25 ms a micro-batch against 31-33 ms predicted while its
bubble came out within 0.04: the calibration had timed the weight-heavy blocks slower than the runs met them, and the
schedule was right. This ratio puts that beside each bubble.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from strategies.action_tables import Action, dependencies

Span = dict[str, Any]
"""One action of a timeline as records keep it: rank, stage, kind (F, B, I, W), microbatch, start_ms, end_ms."""


def _stage(span: Span) -> int:
    """The span's stage; records from before stages were named hold one stage a rank: its rank's."""
    return int(span["stage"] if "stage" in span else span["rank"])


def _durations(timeline: Sequence[Span]) -> dict[tuple[Any, ...], float]:
    return {(s["rank"], _stage(s), s["kind"], s["microbatch"]): s["end_ms"] - s["start_ms"] for s in timeline}


def actions_over_predicted(measured: Sequence[Span] | None, predicted: Sequence[Span] | None) -> float | None:
    """The time the actions both timelines hold (matched by rank, stage, kind and micro-batch) took, summed, over the
    time predicted for them: the heavy actions weigh as they weigh in the step. None where either timeline is missing
    or no action matches. Below 1: the actions ran quicker than predicted (the calibrated compute or the per-action
    residual too long), whatever the bubble did."""
    if not measured or not predicted:
        return None
    ran, replayed = _durations(measured), _durations(predicted)
    both = ran.keys() & replayed.keys()
    expected = sum(replayed[key] for key in both)
    return sum(ran[key] for key in both) / expected if expected > 0 else None


INPUT_FIRST, INPUT_AWAITED, OWN_INPUT = "start_input_first_ms", "start_input_awaited_ms", "start_own_input_ms"
"""How long a rank took to start an action, median over a step's actions of each kind: after the rank came free with
the action's input (from another rank) already sent; after that input was sent, where the rank came free first; after
the rank came free, where the input was its own (stage 0's forwards, the last stage's backwards, a W after its I).

gloo sends a message only once its receiver has posted the matching receive, and then the sender's thread must run;
torch's one-stage schedules post a receive as its action comes up, so an input sent first waits for that. On the
2-core VM (six target sweeps' pipeline runs, the median of the runs' medians, docs/predictor.md) at 2 ranks every kind
started within 0.3-0.5 ms; at 4 processes on 2 cores an input there first cost 1.3-3.1 ms, the other two 0.3-0.6 ms:
one fitted gap before every action does not tell them apart."""


def _pipelines(timeline: Sequence[Span]) -> dict[Any, int]:
    """Each rank's pipeline: the ranks in order, cut into as many pipelines as ranks hold stage 0 (pp inside dp,
    strategies/mesh.py); one pipeline where that does not divide them."""
    ranks = sorted({s["rank"] for s in timeline})
    replicas = len({s["rank"] for s in timeline if _stage(s) == 0}) or 1
    block = len(ranks) // replicas if len(ranks) % replicas == 0 else len(ranks)
    return {rank: i // block for i, rank in enumerate(ranks)}


def _sender(span: Span, last_stage: int) -> tuple[int, tuple[str, ...]] | None:
    """The neighbouring stage and the kinds of its action whose output this action takes, as the cost model's schedule
    replay waits on them (``dependencies``); None: its input is its own."""
    action = Action(_stage(span), span["kind"], span["microbatch"])
    return next(((stage, kinds) for stage, kinds in dependencies(action, last_stage) if stage != action.stage), None)


def start_delays(timeline: Sequence[Span] | None) -> dict[str, float | None]:
    """``INPUT_FIRST``, ``INPUT_AWAITED`` and ``OWN_INPUT`` of one step's timeline (None where no action was of that
    kind, or there is no timeline)."""
    delays: dict[str, list[float]] = {INPUT_FIRST: [], INPUT_AWAITED: [], OWN_INPUT: []}
    if timeline:
        pipeline = _pipelines(timeline)
        stage_of = {(pipeline[s["rank"]], _stage(s)): s["rank"] for s in timeline}
        last_stage = max(_stage(s) for s in timeline)
        sent = {(pipeline[s["rank"]], _stage(s), s["kind"], s["microbatch"]): s["end_ms"] for s in timeline}
        for rank in sorted(pipeline):
            order = sorted((s for s in timeline if s["rank"] == rank), key=lambda s: s["start_ms"])
            for before, span in zip(order, order[1:], strict=False):
                free, source = before["end_ms"], _sender(span, last_stage)
                if source is not None and stage_of.get((pipeline[rank], source[0])) == rank:
                    source = None  # the neighbouring stage is on this rank too (a V-shaped schedule's turn)
                if source is None:
                    delays[OWN_INPUT].append(span["start_ms"] - free)
                    continue
                arrived = [sent[key] for kind in source[1]
                           if (key := (pipeline[rank], source[0], kind, span["microbatch"])) in sent]
                if not arrived:
                    continue
                ready = min(arrived)
                delays[INPUT_FIRST if ready <= free else INPUT_AWAITED].append(span["start_ms"] - max(free, ready))
    return {name: statistics.median(values) if values else None for name, values in delays.items()}
