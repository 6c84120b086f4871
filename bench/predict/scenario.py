"""A run's configuration as the ``Scenario`` its strategy's cost model prices (strategies/cost_model.py)."""

from __future__ import annotations

import dataclasses
import functools

import torch

import models
from bench.harness.config import RunConfig
from bench.predict.costs import cost_model
from models.backward_peaks import BackwardPeak, backward_peaks
from models.sizes import batch_bytes_per_sample
from strategies.cost_model import Scenario

__all__ = ["Scenario", "scenario_for"]


def scenario_for(config: RunConfig) -> Scenario:
    """The cost-relevant options of a resolved run configuration; ValueError where its strategy has no model
    for it."""
    run, pipeline, workload = config.run, config.pipeline, config.workload
    common = Scenario(config.strategy, run.devices, run.global_batch, config.split.microbatches, pipeline.schedule,
                      pipeline.stages_per_rank, config.split.balance, config.buckets.bucket_cap_mb,
                      config.fsdp.reshard_after_forward, config.mesh.dp, config.mesh.pp)
    # counted where a rank's samples and the whole batch are read: data parallelism's ranks and one device's
    samples = (max(1, run.global_batch // run.devices), run.global_batch)
    common = dataclasses.replace(common, batch_bytes_per_sample=_batch_bytes(workload.model, workload.preset,
                                                                             workload.norm),
                                 backward_peaks=_backward_peaks(workload.model, workload.preset, workload.norm,
                                                                samples))
    return cost_model(config.strategy).specialise(common, config, workload.model, workload.preset, workload.norm)


@functools.lru_cache(maxsize=16)
def _meta_spec(model: str, preset: str, norm: str) -> models.ModelSpec | None:
    """The model built on the meta device (no weights made); None for a model of one's own that cannot be built there
    (a user's builder may need real tensors): its prediction goes on without what is counted from it."""
    try:
        with torch.device("meta"):
            return models.build_model(model, preset, norm)
    except Exception:
        return None


@functools.lru_cache(maxsize=64)
def _batch_bytes(model: str, preset: str, norm: str) -> float:
    """``batch_bytes_per_sample`` of the model (0: the batch not counted)."""
    spec = _meta_spec(model, preset, norm)
    try:
        return batch_bytes_per_sample(spec) if spec is not None else 0.0
    except Exception:  # a batch the meta device cannot make: the prediction goes on without it
        return 0.0


@functools.lru_cache(maxsize=64)
def _backward_peaks(model: str, preset: str, norm: str, samples: tuple[int, int]) -> tuple[BackwardPeak, ...]:
    """``backward_peaks`` of the model; none (each block's moments at its edges) where it cannot be built or tracked
    on the meta device."""
    spec = _meta_spec(model, preset, norm)
    try:
        return backward_peaks(spec, samples) if spec is not None else ()
    except Exception:  # a block the meta device cannot run backward: its memory is predicted from the blocks' edges
        return ()
