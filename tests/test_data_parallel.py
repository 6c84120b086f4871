"""``dp``: nn.DataParallel's pass-through on CPU, honest records, unwrapped state, equivalence with one device."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import models
from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from strategies.data_parallel import DataParallelStrategy, apply_data_parallel, flatten_rnn_weights
from strategies.options import RunOptions
from tests.helpers.equivalence import assert_matches_reference, reference


def _config(tmp_path: Path, **kw: object) -> RunConfig:
    base = {"strategy": "dp", "devices": 2, "preset": "tiny", "steps": 2, "warmup": 1, "accelerator": "cpu"}
    return resolve(RunConfig.from_flags(**{**base, "out": str(tmp_path / "r.jsonl"), **kw}))


@pytest.mark.parametrize(("model", "norm"),
                         [("mlp", "group"), ("rnn", "group"), ("cnn", "group"), ("transformer", "group")])
def test_dp_matches_one_device(model: str, norm: str, tmp_path: Path) -> None:
    # 1 warm-up + 2 timed = 3 optimizer steps. On GPUs the loss is computed on the gathered
    # batch, so only BatchNorm (statistics per replica) would differ; on a CPU nn.DataParallel
    # calls the module on the whole batch, so even BatchNorm would match.
    config = _config(tmp_path, model=model, norm=norm)
    result = train(config, capture_state=True)
    assert_matches_reference(global_losses(result.ranks), result.model_state, reference(config))


def test_cpu_run_is_recorded_as_one_emulated_device(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, model="mlp", devices=3, batch_size=2)
    with caplog.at_level(logging.WARNING, logger="strategies.data_parallel"):
        result = train(config)
    assert result.topology.device_count == 1 and result.topology.emulated is True
    assert result.strategy_fields == {
        "requested_devices": 3,
        "effective_device_count": 1,
        "pass_through": True,
        "scatter_chunk_sizes": [1, 1],  # what 3 GPUs would get: 2 samples, 2 replicas work
    }
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "cuts a batch of 2 into 1/1: only 2 of 3 devices get work" in messages
    assert "stands in for 3 devices on 1" in messages


def test_model_state_has_no_module_prefix_and_loads_both_ways() -> None:
    torch.manual_seed(0)
    spec = models.build_model("mlp", "tiny")
    strategy = DataParallelStrategy(RunOptions(devices=2, batch_size=8, accelerator="cpu"))
    wrapped = strategy.prepare(spec, strategy.local_topology())
    assert isinstance(wrapped, nn.DataParallel)
    state = strategy.model_state(wrapped)
    assert list(state) == list(spec.blocks.state_dict())
    assert not any(k.startswith("module.") for k in state)
    torch.manual_seed(1)
    other = models.build_model("mlp", "tiny").blocks
    other.load_state_dict(state)  # dp's state into a plain model (single, ddp, ...)
    wrapped.module.load_state_dict(other.state_dict())  # and any plain state into dp's model
    torch.testing.assert_close(other(torch.ones(2, 32)), wrapped(torch.ones(2, 32)), rtol=0, atol=0)


def test_rnns_flatten_their_weights_before_each_forward() -> None:
    spec = models.build_model("rnn", "tiny")
    calls = []
    lstm = spec.blocks[1].lstm
    lstm.flatten_parameters = lambda: calls.append("flat")  # type: ignore[method-assign]
    model = apply_data_parallel(spec.blocks, (torch.device("cpu"),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no contiguity (or any other) warning
        model(torch.zeros(2, 16, dtype=torch.long))
    assert calls == ["flat"]
    assert flatten_rnn_weights(nn.Sequential(nn.LSTM(4, 4), nn.GRU(4, 4), nn.Linear(4, 4))) == 2


def test_sync_batchnorm_is_refused_for_dp(tmp_path: Path) -> None:
    from strategies import ConfigError

    with pytest.raises(ConfigError, match="--sync-batchnorm is for ddp, zero1, not dp"):
        _config(tmp_path, model="cnn", sync_batchnorm=True)
