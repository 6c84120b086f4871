"""Communication bytes per step (bench/harness/comm.py): the payload each rank hands to gloo, counted, on the
strategies whose collectives are known by arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.comm import counted_bytes, mean_bytes
from bench.harness.config import RunConfig, resolve
from models import build_model
from tests.helpers.ranks import run_ranks_sequence


def test_only_the_backends_sends_and_collectives_count() -> None:
    events = [
        ("gloo:all_reduce", [[10, 10]], ["float"]),  # 400 bytes
        ("gloo:send", [[8]], ["c10::BFloat16"]),  # 16
        ("gloo:recv", [[8]], ["c10::BFloat16"]),  # what the other rank sent: not this rank's payload
        ("gloo:barrier", [[1]], ["float"]),
        ("gloo:broadcast", [[11]], ["int"]),  # control: DDP's bucket order after its first step
        ("c10d::allreduce_", [[10, 10]], ["float"]),  # the dispatcher's op above the backend's call
        ("aten::mm", [[10, 10], [10, 10]], ["float", "float"]),
    ]
    assert counted_bytes(events) == 416


def test_the_mean_over_ranks_leaves_out_ranks_that_did_not_count() -> None:
    assert mean_bytes([100, 300, None]) == 200
    assert mean_bytes([None, None]) is None


@pytest.mark.distributed
def test_ddp_sends_its_gradients_once_and_zero3_gathers_twice_and_scatters_once(tmp_path: Path) -> None:
    def config(strategy: str, **kw: object) -> RunConfig:
        return resolve(RunConfig.from_flags(strategy=strategy, devices=2, model="mlp", preset="tiny", norm="group",
                                            steps=1,
                                 warmup=2, accelerator="cpu", out=str(tmp_path / "r.jsonl"), timeout_s=60, **kw))

    ddp, fsdp = run_ranks_sequence([config("ddp"), config("fsdp")], 2, tmp_path)
    parameter_bytes = 4 * sum(p.numel() for p in build_model("mlp", "tiny", norm="group").blocks.parameters())
    assert [r.comm_bytes for r in ddp[0].ranks] == [parameter_bytes] * 2  # one all-reduce of every gradient
    # ZeRO-3: a half-shard gathered in forward and again in backward, the whole gradient reduce-scattered
    assert [r.comm_bytes for r in fsdp[0].ranks] == [2 * parameter_bytes] * 2
