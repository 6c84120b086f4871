"""``mp``: stages on (emulated) devices in one process, with and without micro-batches, trains like ``single``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from tests.helpers.equivalence import assert_matches_reference, reference

CASES = [
    # (model, norm, devices, microbatches, balance)
    ("mlp", "batch", 2, 1, "even"),
    ("mlp", "batch", 2, 4, "params"),
    ("mlp", "batch", 4, 8, "time"),
    ("rnn", "batch", 2, 1, "even"),
    ("rnn", "batch", 2, 4, "1,3"),
    ("cnn", "group", 2, 1, "even"),
    ("cnn", "group", 2, 4, "time"),
    ("transformer", "group", 2, 4, "even"),
]


@pytest.mark.parametrize(("model", "norm", "devices", "microbatches", "balance"), CASES)
def test_mp_trains_like_one_device(
    model: str, norm: str, devices: int, microbatches: int, balance: str, tmp_path: Path
) -> None:
    config = resolve(RunConfig.from_flags(strategy="mp", model=model, preset="tiny", norm=norm, devices=devices,
                                          steps=3,
                               warmup=1, microbatches=microbatches, balance=balance,
                               out=str(tmp_path / "r.jsonl")))
    result = train(config, capture_state=True)
    losses = global_losses(result.ranks)
    assert len(losses) == 4 and losses[0] != losses[-1]  # it trained
    assert_matches_reference(losses, result.model_state, reference(config))

    fields = result.strategy_fields
    assert len(fields["balance"]) == devices and fields["stages"] == devices
    if "," in balance:
        assert fields["balance"] == [int(b) for b in balance.split(",")]
    assert fields["theoretical_bubble_fraction"] == pytest.approx((devices - 1) / (microbatches + devices - 1))
    # One forward and one backward per stage and micro-batch in the recorded step.
    timeline = fields["timeline"]
    assert len(timeline) == 2 * devices * microbatches
    assert {(s["stage"], s["microbatch"], s["kind"]) for s in timeline} == {
        (s, i, k) for s in range(devices) for i in range(microbatches) for k in "FB"
    }
    assert all(0 <= s["start_ms"] <= s["end_ms"] for s in timeline)
    # One process, one CPU: stages take turns, so each idles at least while the others compute.
    busy = fields["stage_busy_ms"]
    assert len(busy) == devices and all(b > 0 for b in busy)
    assert all(0 < bubble < 1 for bubble in fields["measured_bubble_fraction_per_device"])
    # ... and exactly so: one thread issues every span, so no two overlap, and the devices' busy shares
    # (1 - bubble) add up to at most the whole step. A timer timing the wrong interval breaks both.
    spans = sorted((s["start_ms"], s["end_ms"]) for s in timeline)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False)), spans
    assert sum(1 - bubble for bubble in fields["measured_bubble_fraction_per_device"]) <= 1 + 1e-9
    assert fields["stage_imbalance"] == pytest.approx(max(busy) / (sum(busy) / devices))
    assert result.topology.emulated


def test_balance_by_time_cuts_where_the_profiled_cost_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import strategies.stages as stages_module

    calls = []

    def fake_profile(blocks, sample, device):  # noqa: ANN001, ANN202
        calls.append((len(blocks), tuple(sample.shape)))
        return [1.0, 1.0, 1.0, 5.0, 1.0]  # mlp tiny: 4 blocks and the head

    monkeypatch.setattr(stages_module, "profile_block_times", fake_profile)
    config = resolve(RunConfig.from_flags(strategy="mp", model="mlp", preset="tiny", devices=2, steps=1, warmup=0,
                                          microbatches=2, balance="time", out=str(tmp_path / "r.jsonl")))
    assert train(config).strategy_fields["balance"] == [3, 2]  # stage costs 3 and 6, the best max
    assert calls == [(5, (4, 32))]  # profiled once, on one micro-batch (8 / 2 samples)


def test_profile_block_times_leaves_the_model_untouched() -> None:
    import torch

    from models import build_model
    from strategies.stages import profile_block_times

    spec = build_model("cnn", "tiny", "batch")
    before = {k: v.clone() for k, v in spec.blocks.state_dict().items()}
    times = profile_block_times(spec.blocks, spec.make_batch(2, torch.Generator())[0], torch.device("cpu"))
    assert len(times) == len(spec.blocks) and all(t > 0 for t in times)
    after = spec.blocks.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BatchNorm's running stats included
    assert all(p.grad is None for p in spec.blocks.parameters())
