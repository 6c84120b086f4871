"""The torch internals TimedStage overrides still exist, with the arguments it reads (strategies/pipeline_stage.py)."""

from __future__ import annotations

import inspect

import pytest

from strategies.pipeline_stage import TIMED_METHODS, timed_stage_class

pipelining = pytest.importorskip("torch.distributed.pipelining")


@pytest.mark.parametrize("name", TIMED_METHODS)
def test_the_timed_methods_exist_on_this_torch(name: str) -> None:
    assert callable(getattr(pipelining.PipelineStage, name, None)), f"PipelineStage.{name} is gone"
    assert name in vars(timed_stage_class())


def test_backward_one_chunk_still_takes_full_backward_second() -> None:
    # TimedStage reads ``full_backward`` by keyword or as the second positional argument after the chunk id.
    parameters = list(inspect.signature(pipelining.PipelineStage.backward_one_chunk).parameters)
    assert parameters[:3] == ["self", "bwd_chunk_id", "loss"] and parameters[3] == "full_backward"
