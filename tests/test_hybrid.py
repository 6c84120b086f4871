"""``hybrid``: dp x pp, and the N-D meshes (FSDP, TP, pipeline composed) on 4 and 8 gloo ranks train like
``single``; bad input.

The runs of one world size share one spawned group (``run_ranks_sequence``): forming it costs
seconds, a tiny run a fraction of one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses
from tests.helpers.cli import run_in_process
from tests.helpers.equivalence import assert_matches_reference, reference
from tests.helpers.ranks import merged_state, run_ranks_sequence

# --- 2 x 2 on 4 gloo ranks against single -----------------------------------------------------

BASE = RunConfig.from_flags(strategy="hybrid", model="mlp", preset="tiny", devices=4, dp=2, pp=2, steps=3, warmup=1,
                            microbatches=2)
CONFIGS = {
    "mlp": BASE,
    "cnn-group": BASE.with_flags(model="cnn", norm="group"),
    "transformer": BASE.with_flags(model="transformer"),
}


@pytest.fixture(scope="module")
def hybrid_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[RunConfig, list]]:
    folder = tmp_path_factory.mktemp("hybrid")
    configs = {k: resolve(c.with_flags(out=str(folder / "r.jsonl"))) for k, c in CONFIGS.items()}
    results = run_ranks_sequence(list(configs.values()), world_size=4, folder=folder, timeout_s=400)
    return {k: (c, r) for (k, c), r in zip(configs.items(), results, strict=True)}


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(CONFIGS))
def test_hybrid_2x2_trains_like_one_device(case: str, hybrid_runs: dict[str, tuple[RunConfig, list]]) -> None:
    config, results = hybrid_runs[case]
    losses = global_losses(results[0].ranks)
    assert len(losses) == 4 and losses[0] != losses[-1]
    assert_matches_reference(losses, merged_state(results), reference(config))

    # Only each replica's last stage (ranks 1 and 3) reports a loss, each on its own half of the batch.
    per_rank = [stats.losses for stats in results[0].ranks]
    assert [all(loss is None for loss in r) for r in per_rank] == [True, False, True, False]
    assert per_rank[1] != per_rank[3]
    # Averaged gradients and the same step keep the replicas of each stage identical.
    for first, second in ((0, 2), (1, 3)):
        a, b = results[first].model_state, results[second].model_state
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    fields = results[0].strategy_fields
    assert (fields["dp"], fields["pp"], fields["mesh"]) == (2, 2, [[0, 1], [2, 3]])
    assert fields["stages_of_rank"] == [[0], [1], [0], [1]] and fields["backend"] == "gloo"
    assert (fields["per_replica_batch_size"], fields["microbatch_size"]) == (4, 2)
    assert fields["theoretical_bubble_fraction"] == pytest.approx(1 / 3)
    assert len(fields["measured_bubble_fraction_per_device"]) == 4 and 0 < fields["measured_bubble_fraction"] < 1
    assert {s["rank"] for s in fields["timeline"]} == {0, 1, 2, 3} and len(fields["timeline"]) == 4 * 2 * 2
    assert fields["grad_reduce_ms"] > 0 and len(fields["grad_reduce_ms_per_rank"]) == 4
    # Each stage reduces exactly its own parameters' gradients, the same bytes in both replicas.
    sizes = fields["grad_reduce_bytes_per_rank"]
    total = sum(v.numel() * v.element_size() for v in reference(config)[1].values() if v.is_floating_point())
    assert sizes[0] == sizes[2] and sizes[1] == sizes[3] and sizes[0] + sizes[1] == total
    assert fields["parts"]["pp"] == {"strategy": "pp", "devices": 2, "batch_size": 4, "microbatches": 2,
                                     "schedule": "gpipe", "stages_per_rank": 1}


# --- N-D meshes on 4 gloo ranks against single -----------------------------------------------

ND = RunConfig.from_flags(strategy="hybrid", model="transformer", preset="tiny", devices=4, steps=3, warmup=1)
ND_CONFIGS = {
    "dp_shard2-tp2-mlp": ND.with_flags(model="mlp", dp_shard=2, tp=2),
    "dp_shard2-tp2-transformer": ND.with_flags(dp_shard=2, tp=2),
    "dp_shard2-pp2-mlp": ND.with_flags(model="mlp", dp_shard=2, pp=2, microbatches=2),
    "dp_shard2-pp2-transformer": ND.with_flags(dp_shard=2, pp=2, microbatches=2),
    "dp_shard2-pp2-v2-mlp": ND.with_flags(model="mlp", dp_shard=2, pp=2, microbatches=2,
                                          schedule="interleaved-1f1b", stages_per_rank=2),
    "dp2-dp_shard2-transformer": ND.with_flags(dp=2, dp_shard=2),  # HSDP
    "dp2-tp2-transformer": ND.with_flags(dp=2, tp=2),  # replicas of DTensors: HSDP with shards of 1
}
ND_FIELDS = {  # (mesh_dims, mesh, fsdp_dims)
    "dp_shard2-tp2": (["dp_shard", "tp"], [[0, 1], [2, 3]], ["dp_shard"]),
    "dp_shard2-pp2": (["dp_shard", "pp"], [[0, 1], [2, 3]], ["dp_shard"]),
    "dp_shard2-pp2-v2": (["dp_shard", "pp"], [[0, 1], [2, 3]], ["dp_shard"]),
    "dp2-dp_shard2": (["dp", "dp_shard"], [[0, 1], [2, 3]], ["dp", "dp_shard"]),
    "dp2-tp2": (["dp", "tp"], [[0, 1], [2, 3]], ["dp", "dp_shard"]),
}


@pytest.fixture(scope="module")
def nd_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[RunConfig, list]]:
    folder = tmp_path_factory.mktemp("nd")
    configs = {k: resolve(c.with_flags(out=str(folder / "r.jsonl"))) for k, c in ND_CONFIGS.items()}
    results = run_ranks_sequence(list(configs.values()), world_size=4, folder=folder, timeout_s=400)
    return {k: (c, r) for (k, c), r in zip(configs.items(), results, strict=True)}


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(ND_CONFIGS))
def test_nd_mesh_trains_like_one_device(case: str, nd_runs: dict[str, tuple[RunConfig, list]]) -> None:
    config, results = nd_runs[case]
    losses = global_losses(results[0].ranks)
    assert len(losses) == 4 and losses[0] != losses[-1]
    # Every rank's state is the whole model's (gathered from the shards), or its stage's whole blocks.
    assert_matches_reference(losses, merged_state(results), reference(config))
    fields = results[0].strategy_fields
    degrees = (config.mesh.dp or 1, config.mesh.dp_shard or 1, config.mesh.pp or 1, config.mesh.tp or 1)
    assert (fields["dp"], fields["dp_shard"], fields["pp"], fields["tp"]) == degrees
    assert (fields["mesh_dims"], fields["mesh"], fields["fsdp_dims"]) == ND_FIELDS[case.rsplit("-", 1)[0]]
    assert "grad_reduce_ms" not in fields and fields["parts"] == {}
    # Memory by kind where there is no pipeline: torch's FSDP-aware tracker (MemTracker cannot follow a pipeline).
    trackers = {d["tracker"] for stats in results[0].ranks for d in stats.memory_by_kind or []}
    assert trackers == (set() if config.mesh.pp else {"FSDPMemTracker"})
    per_rank = [stats.losses for stats in results[0].ranks]
    if config.mesh.pp:  # each shard's last stage (ranks 1 and 3) reports, each on its own half of the batch
        assert [all(loss is None for loss in r) for r in per_rank] == [True, False, True, False]
        stages = [[0, 2], [1, 3]] if config.pipeline.stages_per_rank == 2 else [[0], [1]]
        assert per_rank[1] != per_rank[3] and fields["stages_of_rank"] == stages * 2
    elif config.mesh.tp:  # a shard's tp ranks (0 and 1; 2 and 3) see the same half of the batch
        assert per_rank[0] == per_rank[1] and per_rank[2] == per_rank[3] and per_rank[0] != per_rank[2]
    else:  # HSDP: four shards of the batch
        assert len({tuple(r) for r in per_rank}) == 4


@pytest.mark.distributed
def test_dp_shard_x_tp_x_pp_on_8_ranks_trains_like_one_device(tmp_path: Path) -> None:
    # The one 8-rank run of the suite (about 25 s on 2 cores): FSDP and TP inside each pipeline stage.
    config = resolve(ND.with_flags(devices=8, dp_shard=2, tp=2, pp=2, microbatches=2,
                                   out=str(tmp_path / "r.jsonl")))
    (results,) = run_ranks_sequence([config], world_size=8, folder=tmp_path, timeout_s=400)
    assert_matches_reference(global_losses(results[0].ranks), merged_state(results), reference(config))
    fields = results[0].strategy_fields
    assert fields["mesh_dims"] == ["dp_shard", "pp", "tp"] and fields["mesh"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # Only the last stage's ranks report: both tp ranks of each of the two shards.
    reporting = [r for r, stats in enumerate(results[0].ranks) if stats.losses[0] is not None]
    assert reporting == [2, 3, 6, 7]


# --- bad input: one line, exit 2, nothing written ---------------------------------------------

BAD = [
    (["--devices", "8", "--dp", "2", "--pp", "2"], "dp(2) * dp_shard(1) * pp(2) * tp(1) = 4 != devices(8); choose "
     "--dp, --dp-shard, --pp, --tp whose product is --devices"),
    (["--devices", "4", "--dp", "2", "--pp", "2", "--tp", "2"],
     "dp(2) * dp_shard(1) * pp(2) * tp(2) = 8 != devices(4)"),
    (["--devices", "8", "--dp-shard", "2", "--tp", "4", "--model", "transformer"],
     "tensor-parallel degree 4 does not divide attention heads 2 (--tp 4)"),
    (["--devices", "6", "--dp-shard", "2", "--tp", "3"],
     "tensor-parallel degree 3 does not divide hidden width 32 (--tp 3)"),
    (["--devices", "4", "--dp-shard", "2", "--tp", "2", "--model", "cnn"],
     "--tp 2 needs a tensor-parallel plan and this model has none: no sharding rule for BatchNorm2d, Conv2d"),
    (["--devices", "4", "--dp-shard", "2", "--pp", "2", "--schedule", "interleaved-zb", "--stages-per-rank", "2",
      "--microbatches", "2"], "schedule 'interleaved-zb' splits each backward into input and weight halves, which "
     "FSDP's gradient reduction (over dp-shard) does not follow here"),
    (["--devices", "4", "--dp-shard", "4", "--microbatches", "2"],
     "--microbatches 2 splits a pipeline's batch, and --pp 1 has no pipeline"),
    (["--devices", "4", "--dp-shard", "2", "--pp", "2", "--microbatches", "8"],
     "global batch 8 is not divisible by 16 (2 FSDP shards x 8 micro-batches)"),
    (["--devices", "8", "--dp", "2", "--dp-shard", "2", "--pp", "2", "--microbatches", "4"],
     "global batch 8 is not divisible by 16 (2 replicas x 2 FSDP shards x 4 micro-batches)"),
    (["--devices", "4", "--dp", "2", "--pp", "2", "--microbatches", "8"],
     "global batch 8 is not divisible by 16 (2 data-parallel replicas x 8 micro-batches)"),
    (["--devices", "4", "--batch-size", "6", "--microbatches", "2"],
     "global batch 6 is not divisible by 4 (2 data-parallel replicas x 2 micro-batches)"),
    (["--devices", "4", "--schedule", "interleaved-1f1b"],
     "schedule 'interleaved-1f1b' needs at least 2 stage(s) per rank, got --stages-per-rank 1"),
    (["--devices", "4", "--schedule", "looped-bfs", "--stages-per-rank", "3"], "cannot split 5 blocks into 6 stages"),
    (["--devices", "4", "--balance", "3,1,1"], "balance [3, 1, 1] has 3 stages, but the run has 2"),
    (["--devices", "4", "--sync-batchnorm"], "--sync-batchnorm is for ddp, zero1, not hybrid"),
    (["--devices", "4", "--pp", "0"], "--pp must be at least 1, got 0"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_hybrid_input_is_one_clear_line(
    args: list[str], message: str, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_in_process(
        capsys, "run", "--strategy", "hybrid", "--model", "mlp", "--preset", "tiny", "--out", str(results), *args
    )
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err
    assert not results.exists()
