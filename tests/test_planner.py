"""bench/experiments/planner/ (space, search, commands): the space from the registry, the search with a fake
predictor, the commands as literal lines."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, ClassVar

import pytest

from bench.cli import build_parser
from bench.experiments.planner.commands import commands, run_flags
from bench.experiments.planner.search import Candidate, search, tied_with_first, why_slower
from bench.experiments.planner.space import SearchSpace, candidates, factorisations
from bench.harness.config import RunConfig, resolve
from strategies import STRATEGIES
from strategies.options import SplitOptions
from strategies.single import SingleDevice

BASE = RunConfig.from_flags(accelerator="cpu", out="/tmp/plan-test.jsonl")


def space(**changes: Any) -> SearchSpace:
    fields = dict(model="mlp", preset="tiny", devices=4, global_batch=32, strategies=tuple(STRATEGIES),
                  schedules=("gpipe", "1f1b", "interleaved-1f1b"), microbatches=(1, 4))
    return SearchSpace(**{**fields, **changes})


def test_factorisations_are_every_ordered_product() -> None:
    assert factorisations(8, 2) == [(1, 8), (2, 4), (4, 2), (8, 1)]
    assert factorisations(1, 4) == [(1, 1, 1, 1)]
    assert len(factorisations(512, 4)) == 220  # 2^9 into 4 ordered parts: C(9 + 3, 3)
    assert all(a * b * c == 12 for a, b, c in factorisations(12, 3))


def test_each_strategy_gets_the_axes_of_the_groups_it_reads() -> None:
    configs = list(candidates(space(), BASE))
    by_strategy: dict[str, list[RunConfig]] = {}
    for c in configs:
        by_strategy.setdefault(c.strategy, []).append(c)
    assert len(by_strategy["ddp"]) == 1 and len(by_strategy["tp"]) == 1
    assert [c.fsdp.reshard_after_forward for c in by_strategy["fsdp"]] == [True, False]
    assert sorted(c.split.microbatches for c in by_strategy["mp"]) == [1, 4]
    # pp: gpipe and 1f1b at v = 1, interleaved-1f1b at v = 2 only, each with 2 micro-batch counts
    assert sorted((c.pipeline.schedule, c.pipeline.stages_per_rank) for c in by_strategy["pp"]) == sorted(
        [("gpipe", 1)] * 2 + [("1f1b", 1)] * 2 + [("interleaved-1f1b", 2)] * 2)
    meshes = {(c.mesh.dp, c.mesh.dp_shard, c.mesh.pp, c.mesh.tp) for c in by_strategy["hybrid"]}
    # every degree that multiplies to 4, less the 4 meshes of one dimension (ddp, fsdp, pp or tp alone)
    assert len(meshes) == len(factorisations(4, 4)) - 4 == 6
    assert (1, 2, None, 2) not in meshes and (1, 2, 1, 2) in meshes
    assert (4, None, 1, None) not in meshes and (1, None, 4, None) not in meshes


def test_a_strategy_defined_here_is_searched_with_its_own_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Chunked(SingleDevice):
        name = "chunked-test"
        reads: ClassVar[tuple[type, ...]] = (SplitOptions,)
        max_devices = None

    monkeypatch.setitem(STRATEGIES, Chunked.name, Chunked)
    configs = list(candidates(space(strategies=("chunked-test",)), BASE))
    assert sorted(c.split.microbatches for c in configs) == [1, 4]  # nobody named it anywhere else


def fake_predict(step_ms: dict[str, float], memory: dict[str, float]) -> Any:
    def predict(source: object, config: RunConfig, label: str) -> dict[str, Any]:
        if config.strategy not in step_ms:
            raise ValueError(f"no cost model for strategy {config.strategy!r}")
        ms = step_ms[config.strategy]
        return {"predicted_samples_per_s": config.run.batch_size / ms * 1e3, "predicted_step_time_ms": ms,
                "predicted_compute_ms": ms * 0.5, "predicted_exposed_comm_ms": ms * 0.3,
                "predicted_update_ms": ms * 0.1, "predicted_memory_by_kind": {"total": memory[config.strategy]}}
    return predict


def test_the_search_ranks_what_fits_prunes_the_rest_and_counts_why() -> None:
    predict = fake_predict({"ddp": 10.0, "fsdp": 8.0, "tp": 20.0}, {"ddp": 100.0, "fsdp": 50.0, "tp": 500.0})
    result = search(space(strategies=("single", "ddp", "fsdp", "tp", "zero1")), BASE, object(), "fake",  # type: ignore[arg-type]
                    predict, memory_budget_bytes=200.0)
    assert [c.config.strategy for c in result.ranked] == ["fsdp", "fsdp", "ddp"]
    assert [c.config.strategy for c in result.too_big] == ["tp"]
    assert result.unpredicted == {"no cost model for strategy 'zero1'": 1}
    assert result.weighed == 5 and not result.refused  # single (at most 1 device) is not generated on 4


def test_a_strategy_that_only_fakes_its_devices_on_a_cpu_is_not_weighed_there() -> None:
    # nn.DataParallel without GPUs is one module call on one device: ranked, it came first at "4 devices"
    result = search(space(strategies=("dp", "ddp")), BASE, object(), "fake",  # type: ignore[arg-type]
                    fake_predict({"dp": 1.0, "ddp": 10.0}, {"dp": 1.0, "ddp": 1.0}), None)
    assert [c.config.strategy for c in result.ranked] == ["ddp"]
    assert result.refused == {"dp without GPUs runs on one device (a pass-through)": 1}


def test_a_candidate_the_runner_refuses_is_refused_with_the_runners_own_words() -> None:
    result = search(space(strategies=("pp",), devices=8, schedules=("gpipe",), microbatches=(1,)), BASE, object(),  # type: ignore[arg-type]
                    "fake", fake_predict({}, {}), None)
    ((reason, count),) = result.refused.items()
    with pytest.raises(Exception, match="blocks") as exc:
        resolve(BASE.with_flags(strategy="pp", model="mlp", preset="tiny", devices=8, batch_size=32))
    assert reason in str(exc.value) and count == 1


def test_ties_and_why_one_is_slower_are_read_from_the_terms() -> None:
    def candidate(samples_per_s: float, compute: float, comm: float, update: float, step: float) -> Candidate:
        return Candidate(BASE, {"predicted_samples_per_s": samples_per_s, "predicted_step_time_ms": step,
                                "predicted_compute_ms": compute, "predicted_exposed_comm_ms": comm,
                                "predicted_update_ms": update}, BASE)

    first, second, third = candidate(100, 5, 2, 1, 8), candidate(96, 5, 3, 1, 9), candidate(80, 7, 2, 1, 10)
    assert tied_with_first([first, second, third], 0.05) == [True, True, False]
    assert why_slower(second, first) == ("exposed communication and idle 3 ms against 2 ms "
                                         "(step 9 vs 8 ms, predicted)")
    assert why_slower(third, second).startswith("compute 7 ms against 5 ms")


def test_commands_name_the_configuration_and_span_nodes_only_when_it_does() -> None:
    config = BASE.with_flags(strategy="hybrid", model="transformer", preset="large", devices=16,
                             batch_size=256, dp=2, pp=8, microbatches=16, schedule="1f1b", precision="bf16")
    run = commands(config, gpus_per_node=8)
    flags = ("--strategy hybrid --model transformer --preset large --devices 16 --batch-size 256 --precision bf16 "
             "--microbatches 16 --schedule 1f1b --dp 2 --pp 8")
    assert run.bench == f"python -m bench run {flags}"
    assert run.torchrun == ('torchrun --nnodes 2 --node-rank "$NODE_RANK" --nproc-per-node 8 --rdzv-backend c10d '
                            f'--rdzv-endpoint "$HEAD:29500" -m bench run {flags}')
    assert run.slurm is not None and run.slurm.startswith("srun --nodes 2 --ntasks-per-node 1 --gpus-per-node 8 ")
    assert commands(config.with_flags(devices=8, dp=1), 8).torchrun is None  # one node
    assert commands(config.with_flags(strategy="mp", devices=16), 8).torchrun is None  # one process
    args = build_parser().parse_args(shlex.split(run.bench)[3:])
    assert (args.strategy, args.dp, args.pp, args.microbatches) == ("hybrid", 2, 8, 16)


def test_run_flags_leave_defaults_out_but_always_name_the_essentials() -> None:
    config = BASE.with_flags(strategy="ddp", model="mlp", preset="small", devices=2, batch_size=64)
    assert run_flags(config) == ["--strategy", "ddp", "--model", "mlp", "--preset", "small", "--devices", "2",
                                 "--batch-size", "64"]
    assert "--no-reshard-after-forward" in run_flags(config.with_flags(reshard_after_forward=False))


def test_rank_correlation_is_spearmans_with_average_ranks_for_ties() -> None:
    from bench.experiments.planner.measure import rank_correlation

    assert rank_correlation([3.0, 2.0, 1.0], [30.0, 20.0, 10.0]) == pytest.approx(1.0)
    assert rank_correlation([3.0, 2.0, 1.0], [10.0, 20.0, 30.0]) == pytest.approx(-1.0)
    assert rank_correlation([4.0, 3.0, 2.0, 1.0], [40.0, 10.0, 30.0, 20.0]) == pytest.approx(0.4)
    assert rank_correlation([1.0, 2.0], [5.0, 5.0]) is None  # no spread in what was measured
    assert rank_correlation([1.0], [2.0]) is None


def test_the_first_pick_is_in_the_measured_tie_only_where_the_intervals_meet() -> None:
    from bench.experiments.planner.measure import Measured, first_pick_in_measured_tie

    first = Candidate(BASE, {}, BASE)
    second = Candidate(dataclasses.replace(BASE, strategy="ddp"), {}, BASE)
    near = [Measured(first, 1, [95.0, 100.0, 105.0]), Measured(second, 2, [100.0, 104.0, 108.0])]
    far = [Measured(first, 1, [60.0, 61.0, 62.0]), Measured(second, 2, [100.0, 104.0, 108.0])]
    assert first_pick_in_measured_tie(near) is True
    assert first_pick_in_measured_tie(far) is False
    assert first_pick_in_measured_tie([Measured(first, 1, [50.0]), Measured(second, 2, [100.0])]) is None
