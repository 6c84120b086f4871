"""tests/helpers/matrix.py: the cases of the pytest-benchmark matrix (tests/benchmarks/)."""

from __future__ import annotations

from tests.helpers.matrix import Case, refusal


def test_a_case_the_model_cannot_take_is_refused_with_bench_s_reason_and_the_others_run() -> None:
    # The CPU run of gpu_check (2 emulated devices) failed on tp for the cnn: it has no tensor-parallel plan.
    assert "tensor-parallel plan" in (refusal(Case("tp", "cnn", 2, "tiny")) or "")
    assert refusal(Case("tp", "mlp", 2, "tiny")) is None
    assert refusal(Case("ddp", "cnn", 2, "tiny")) is None
