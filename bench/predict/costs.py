"""Predicted step time of every strategy from a calibration: compute per block, communication by size.

Each model says what it overlaps and what it leaves exposed, as the strategy runs it:

- single, mp: the blocks one after another (mp's stages take turns, as its devices do), each micro-batch
  a pass of its own, then the update.
- ddp: the forward, then the backward with each gradient bucket's all-reduce starting as the bucket
  fills (reverse block order, the first bucket 1 MiB, then ``--bucket-cap-mb``), one at a time; what
  the last all-reduce runs past the backward is exposed. zero1 updates 1/N of the parameters, then
  every parameter tensor is broadcast from the rank that updated it, one at a time.
- fsdp: each block's all-gather before its forward (and, with ZeRO-3, before its backward) on a
  communication stream that runs one block ahead; each block's gradients reduce-scattered after its
  backward; the update of the shard.
- tp: the sharded blocks' compute divided by the degree; each column/row pair's all-reduce forward and
  backward on the critical path.
- pp, hybrid: the schedule's own action table (strategies/action_tables.py) replayed with the stages'
  calibrated F and B times (I and W half a B each) and transfers of the stage's output; hybrid adds the
  stages' gradient all-reduce over the replicas after the schedule.

Emulated devices share a CPU: every process computes slower while the others compute, by the
calibrated ``slowdown`` at that many processes (a pipeline's at its mean concurrency: its ranks idle
in the bubble), with its share of the cores' threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bench.launch import threads_per_process
from bench.predict.calibration import BlockCost, RuntimeOverheads
from bench.predict.scenario import Scenario
from strategies.action_tables import Action, SimulatedSpan, action_table, simulate, simulated_bubble
from strategies.partition import balance_by_cost, even_balance, explicit_balance
from strategies.schedules import available_schedules, schedule_info
from strategies.timing import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

PIPELINE_ITERATIONS = 8
"""Rounds of a pipeline's concurrency and its slowdown. On the 2-core VM's calibrations (mlp and
transformer small; pp GPipe and 1F1B and dp x pp on 4 ranks) 8 rounds left the step within 0.3% of
where 11 did."""
FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES): small, so the first
all-reduce starts early in the backward."""


@dataclass
class StepPrediction:
    """A predicted step: its time, what it is made of, and the pipeline timeline where there is one."""

    step_ms: float
    compute_ms: float
    exposed_comm_ms: float
    update_ms: float
    bubble: float | None = None
    timeline: list[SimulatedSpan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _pass(blocks: list[BlockCost], ids: range | list[int], samples: float) -> tuple[float, float]:
    return (sum(blocks[i].forward_ms.at(samples) for i in ids), sum(blocks[i].backward_ms.at(samples) for i in ids))


class CostSource(Protocol):
    """Where a prediction's durations come from: a calibration of this machine, or a hardware profile."""

    def blocks(self, threads: int) -> list[BlockCost]: ...
    def optimizer_ms(self, threads: int, parameters: float) -> float: ...
    def copy_ms(self, threads: int, size: float) -> float: ...
    def overhead_ms(self, threads: int, samples: float) -> float: ...
    def slowdown_for(self, processes: int) -> float: ...
    def collective_ms(self, operation: str, size: float, ranks: int) -> float: ...
    def transfer_ms(self, size: float, sender: int, receiver: int) -> float:
        """One point-to-point transfer between global ranks ``sender`` and ``receiver`` (a pipeline's
        neighbours): the link depends on whether they share a node."""
        ...
    def runtime_for(self, ranks: int) -> RuntimeOverheads: ...
    def overlap_for(self, ranks: int) -> float: ...


def predict_step(calibration: CostSource, scenario: Scenario, optimizer_states: int) -> StepPrediction:
    """The predicted step of ``scenario``; ValueError for a strategy or setting with no model here."""
    name = scenario.strategy
    if name in ("single", "dp"):
        return _in_process(calibration, scenario, 1)
    if name == "mp":
        return _in_process(calibration, scenario, scenario.microbatches)
    if name in ("ddp", "zero1"):
        return _data_parallel(calibration, scenario)
    if name == "fsdp":
        return _fsdp(calibration, scenario)
    if name == "tp":
        return _tensor_parallel(calibration, scenario)
    if name in ("pp", "hybrid"):
        return _pipeline(calibration, scenario)
    raise ValueError(f"no cost model for strategy {name!r}")


def _in_process(calibration: CostSource, scenario: Scenario, microbatches: int) -> StepPrediction:
    threads = scenario.threads or threads_per_process(1)  # in-process strategies keep every core
    blocks = calibration.blocks(threads)
    samples = scenario.global_batch / microbatches
    forward, backward = _pass(blocks, range(len(blocks)), samples)
    # Each micro-batch is a pass of its own through every block, paying (or gaining) what a whole pass did
    # beyond its blocks in the calibration's plain steps: single is the plain step measured at that batch,
    # mp M of them, each with mp's own runtime per micro-batch at its stage count.
    handover = calibration.runtime_for(scenario.devices).mp_per_microbatch if scenario.strategy == "mp" else 0.0
    compute = (forward + backward + calibration.overhead_ms(threads, samples) + handover) * microbatches
    update = calibration.optimizer_ms(threads, sum(b.parameters for b in blocks))
    notes = ["dp on the CPU is a pass-through to one device: predicted as single"] if scenario.strategy == "dp" else []
    return StepPrediction(compute + update, compute, 0.0, update, notes=notes)


def _data_parallel(calibration: CostSource, scenario: Scenario) -> StepPrediction:
    n = scenario.devices
    threads = threads_per_process(n)
    blocks, slow = calibration.blocks(threads), calibration.slowdown_for(n)
    samples = scenario.global_batch / n
    forward = (sum(b.forward_ms.at(samples) for b in blocks) + _overhead(calibration, threads, samples)) * slow
    # The backward runs from the last block; a bucket's all-reduce starts once its blocks are done.
    clock, comm_free, bucket, cap, communication = forward, forward, 0.0, FIRST_BUCKET_BYTES, 0.0
    for i in reversed(range(len(blocks))):
        clock += blocks[i].backward_ms.at(samples) * slow
        bucket += blocks[i].parameters * 4
        if bucket >= cap or i == 0:
            reduce = calibration.collective_ms("all_reduce", bucket, n)
            comm_free, communication = max(comm_free, clock) + reduce, communication + reduce
            bucket, cap = 0.0, scenario.bucket_cap_mb * 2**20
    exposed = _partly_hidden(max(0.0, comm_free - clock), communication, calibration.overlap_for(n))
    parameters = sum(b.parameters for b in blocks)
    # The reducer copies the gradients into its buckets, divides them and copies them back: 3 passes.
    exposed += calibration.runtime_for(n).ddp_per_step + 3 * calibration.copy_ms(threads, 4 * parameters) * slow
    if scenario.strategy == "zero1":
        update = calibration.optimizer_ms(threads, parameters / n) * slow
        # ZeroRedundancyOptimizer syncs tensor by tensor (parameters_as_bucket_view=False, its default), each
        # from the rank that updated it: many small tensors pay a broadcast's latency each.
        exposed += sum(calibration.collective_ms("broadcast", 4 * t, n) for b in blocks for t in b.tensor_sizes())
        exposed += calibration.runtime_for(n).zero1_per_step
    else:
        update = calibration.optimizer_ms(threads, parameters) * slow
    return StepPrediction(clock + exposed + update, clock, exposed, update)


def _fsdp(calibration: CostSource, scenario: Scenario) -> StepPrediction:
    n = scenario.devices
    threads = threads_per_process(n)
    blocks, slow = calibration.blocks(threads), calibration.slowdown_for(n)
    samples = scenario.global_batch / n
    gather = [calibration.collective_ms("all_gather", b.parameters * 4 / n, n) for b in blocks]
    reduce = [calibration.collective_ms("reduce_scatter", b.parameters * 4, n) for b in blocks]
    forward = [b.forward_ms.at(samples) * slow for b in blocks]
    backward = [b.backward_ms.at(samples) * slow for b in blocks]
    # One communication stream, one block ahead of the compute: block i's all-gather may start once
    # the previous all-gather is done and block i-1 has started computing.
    comm = compute = started = 0.0
    for i in range(len(blocks)):
        comm = max(comm, started) + gather[i]
        started = max(compute, comm)
        compute = started + forward[i]
    for i in reversed(range(len(blocks))):
        if scenario.reshard_after_forward and i < len(blocks) - 1:  # the last block's stays gathered
            comm = max(comm, started) + gather[i]
        started = max(compute, comm)
        compute = started + backward[i]
        comm = max(comm, compute) + reduce[i]
    overhead = (_overhead(calibration, threads, samples) * slow
                + calibration.runtime_for(n).fsdp_per_block * len(blocks))
    # FSDP2 copies each shard into the all-gather's buffer and the gathered block out of it, and each
    # block's gradients into the reduce-scatter's: about 2 passes over a block's bytes per collective.
    gathered = 2 if scenario.reshard_after_forward else 1
    overhead += sum(calibration.copy_ms(threads, 2 * 4 * b.parameters) for b in blocks) * (gathered + 1) * slow
    busy = sum(forward) + sum(backward) + overhead
    regathers = sum(gather[:-1]) if scenario.reshard_after_forward else 0.0
    exposed = _partly_hidden(max(comm, compute) - (busy - overhead), sum(gather) + regathers + sum(reduce),
                             calibration.overlap_for(n))
    end = busy + exposed
    update = calibration.optimizer_ms(threads, sum(b.parameters for b in blocks) / n) * slow
    return StepPrediction(end + update, busy, end - busy, update)


def _overhead(calibration: CostSource, threads: int, samples: float) -> float:
    """A whole step's own overhead as the multi-process strategies take it: never below zero, as their
    runtimes' residuals (runtime.py) were measured against predictions that took it so."""
    return max(0.0, calibration.overhead_ms(threads, samples))


def _partly_hidden(exposed: float, communication: float, overlap: float) -> float:
    """The communication a step waits for when only ``overlap`` of what could hide behind compute does:
    ``exposed`` where all of it hides, all of ``communication`` where none does."""
    return exposed + (1 - overlap) * max(0.0, communication - exposed)


def _tensor_parallel(calibration: CostSource, scenario: Scenario) -> StepPrediction:
    n = scenario.devices
    threads = threads_per_process(n)
    blocks, slow = calibration.blocks(threads), calibration.slowdown_for(n)
    samples = scenario.global_batch  # every rank sees the whole batch
    compute = comm = 0.0
    pairs = dict(zip(scenario.tp_blocks, scenario.tp_pairs, strict=True))
    for i, block in enumerate(blocks):
        share = 1 / n if i in pairs else 1.0
        compute += (block.forward_ms.at(samples) + block.backward_ms.at(samples)) * share * slow
        # One all-reduce of the block's output forward and one of its input gradient backward, per pair.
        activation = block.output_bytes_per_sample * samples
        comm += 2 * pairs.get(i, 0) * calibration.collective_ms("all_reduce", activation, n)
    compute += _overhead(calibration, threads, samples) * slow
    comm += calibration.runtime_for(n).tp_per_layer * sum(scenario.tp_layers)
    sharded = sum(blocks[i].parameters for i in pairs)
    update = calibration.optimizer_ms(threads, sum(b.parameters for b in blocks) - sharded * (1 - 1 / n)) * slow
    return StepPrediction(compute + comm + update, compute, comm, update)


def _beside(span: SimulatedSpan, spans: list[SimulatedSpan]) -> float:
    """How many ranks compute on average while ``span`` runs, itself included."""
    length = span.end - span.start
    if length <= 0:
        return 1.0
    return sum(max(0.0, min(span.end, s.end) - max(span.start, s.start)) for s in spans) / length


def stage_blocks(calibration: CostSource, scenario: Scenario, stages: int, samples: float) -> list[list[int]]:
    """Which blocks each stage holds under ``--balance`` (strategies/partition.py's rules)."""
    blocks = calibration.blocks(threads_per_process(scenario.devices))
    balance = explicit_balance(scenario.balance, len(blocks), stages)
    if balance is None:
        if scenario.balance == "params":
            balance = balance_by_cost([b.parameters for b in blocks], stages)
        elif scenario.balance == "time":
            balance = balance_by_cost([sum(_pass(blocks, [i], samples)) for i in range(len(blocks))], stages)
        else:
            balance = even_balance(len(blocks), stages)
    starts = [sum(balance[:s]) for s in range(stages)]
    return [list(range(start, start + size)) for start, size in zip(starts, balance, strict=True)]


def _pipeline(calibration: CostSource, scenario: Scenario) -> StepPrediction:
    replicas = scenario.dp or 1 if scenario.strategy == "hybrid" else 1
    ranks = scenario.devices // replicas
    m, v = scenario.microbatches, scenario.stages_per_rank
    threads = scenario.threads or threads_per_process(scenario.devices)
    blocks, all_at_work = calibration.blocks(threads), calibration.slowdown_for(scenario.devices)
    samples = scenario.global_batch / replicas / m
    parts = stage_blocks(calibration, scenario, ranks * v, samples)
    costs = [_pass(blocks, part, samples) for part in parts]
    # Stage s runs on pipeline rank s % ranks; replica r's pipeline holds global ranks r*ranks .. r*ranks+ranks-1
    # (strategies/mesh.py: pp inside dp). A boundary costs what the slowest replica's crossing of it costs.
    sends = [max(calibration.transfer_ms(blocks[part[-1]].output_bytes_per_sample * samples, r * ranks + s % ranks,
                                         r * ranks + (s + 1) % ranks) for r in range(replicas))
             for s, part in enumerate(parts)]
    runtime = calibration.runtime_for(scenario.devices)
    slows: dict[Action, float] = {}

    def duration(action: Action) -> float:
        forward, backward = costs[action.stage]
        share = {FORWARD: forward, BACKWARD: backward, BACKWARD_INPUT: backward / 2, BACKWARD_WEIGHT: backward / 2}
        return share[action.kind] * slows.get(action, all_at_work) + runtime.pp_per_action

    def transfer(action: Action) -> float:  # what crosses into this action from its neighbouring stage
        return sends[action.stage - 1] if action.kind == FORWARD else sends[action.stage]

    table = action_table(schedule_info(scenario.schedule, available_schedules()), ranks, v, m)
    spans = simulate(table, duration, transfer)
    # Ranks idle in the bubble leave the cores to the others: each action computes at the slowdown of
    # the ranks at work beside it (over every replica), found by iterating from all of them at work
    # (each round goes half way: a full step swings between fewer and more actions side by side).
    for _ in range(PIPELINE_ITERATIONS if all_at_work != 1.0 else 0):
        slows = {s.action: (slows.get(s.action, all_at_work) + calibration.slowdown_for(replicas * _beside(s, spans)))
                 / 2 for s in spans}
        spans = simulate(table, duration, transfer)
    makespan = max(s.end for s in spans)
    busy = max(sum(s.end - s.start for s in spans if s.rank == r) for r in table)
    stage_parameters = max(sum(blocks[i].parameters for p in range(r, ranks * v, ranks) for i in parts[p])
                           for r in range(ranks))
    update = calibration.optimizer_ms(threads, stage_parameters) * all_at_work
    # Idle time inside the schedule is the bubble (and waiting on transfers); the replicas' gradient
    # all-reduce runs after it, exposed.
    averaging = (calibration.collective_ms("all_reduce", stage_parameters * 4, replicas)
                 + runtime.hybrid_per_step) if replicas > 1 else 0.0
    split = any(s.action.kind == BACKWARD_WEIGHT for s in spans)
    notes = ["I and W are taken as half a backward each"] if split else []
    # The step's own, once per schedule.
    overhead = _overhead(calibration, threads, samples * m) * all_at_work
    return StepPrediction(makespan + averaging + update + overhead, busy, makespan - busy + averaging, update,
                          simulated_bubble(spans), spans, notes)
