"""bench/harness/labels.py: a run's label names what sets it apart, and nothing it does not have."""

from __future__ import annotations

from bench.harness.labels import file_name, run_label, variant


def test_a_pipeline_names_its_schedule_and_micro_batches() -> None:
    assert variant({"strategy": "pp", "schedule": "1f1b", "microbatches": 8}) == "pp (1f1b, m=8)"
    assert variant({"strategy": "mp", "microbatches": 4}) == "mp (m=4)"
    assert variant({"strategy": "ddp"}) == "ddp"


def test_a_mesh_without_a_pipeline_names_no_schedule() -> None:
    # Seen in bench plan's table: a dp_shard x tp mesh listed as "hybrid (..., gpipe, m=1)".
    flat = {"strategy": "hybrid", "pp": 1, "dp_shard": 4, "tp": 2, "schedule": "gpipe", "microbatches": 1}
    assert variant(flat) == "hybrid (dp-shard=4, pp=1, tp=2)"
    piped = {**flat, "pp": 2, "microbatches": 4}
    assert variant(piped) == "hybrid (dp-shard=4, pp=2, tp=2, gpipe, m=4)"


def test_the_run_label_and_its_file_name() -> None:
    config = {"strategy": "pp", "schedule": "gpipe", "microbatches": 4, "model": "mlp", "devices": 2,
              "batch_size": 64, "repeat": 1}
    assert run_label(config) == "pp (gpipe, m=4) mlp x2 b64 #2"
    assert file_name(run_label(config)) == "pp_gpipe_m=4_mlp_x2_b64_2"
