"""``transformer``: shapes and size, causality, the token-mean loss, its tensor-parallel plan and the arithmetic
behind it (column then row shards add up to the whole layer), and training under ``single``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import models
from bench.harness.config import RunConfig, resolve
from bench.harness.runner import global_losses, train
from models.flops import train_flops_per_sample
from models.transformer import MLP, PRESETS, CausalSelfAttention, TokenCrossEntropy


def _tiny() -> models.ModelSpec:
    torch.manual_seed(0)
    return models.build_model("transformer", "tiny")


def test_tiny_shapes_targets_and_parameter_count() -> None:
    spec = _tiny()
    p = PRESETS["tiny"]
    inputs, targets = spec.make_batch(3, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (3, p.seq_len) and inputs.dtype == targets.dtype == torch.int64
    # The targets are the sequence's next tokens.
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert spec.blocks(inputs).shape == (3, p.seq_len, p.vocab)
    assert len(spec.blocks) == p.depth + 2 and spec.default_batch_size == 8
    d, vocab, seq = p.width, p.vocab, p.seq_len
    per_block = 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d  # q k v out, fc1, fc2, 2 LN
    expected = (vocab + seq) * d + p.depth * per_block + 2 * d + d * vocab + vocab
    assert sum(q.numel() for q in spec.blocks.parameters()) == expected == 30_144


def test_presets_sizes() -> None:
    with torch.device("meta"):
        counts = {name: sum(q.numel() for q in models.build_model("transformer", name).blocks.parameters())
                  for name in models.PRESETS}
    assert counts == {"tiny": 30_144, "small": 3_701_248, "large": 737_504_512}


def test_flops_per_sample_are_three_forwards_of_the_matmuls_and_the_attention() -> None:
    p = PRESETS["tiny"]
    d, seq = p.width, p.seq_len
    linear = seq * (p.depth * 12 * d * d + d * p.vocab)  # q, k, v, out, fc1, fc2 per token, and the head
    attention = p.depth * 2 * seq * seq * d  # q k^T and weights @ v, the causal half counted as torch does
    # Backward is twice the forward: unlike the mlp's first Linear, the first decoder block's inputs
    # (the embeddings) need their gradient.
    assert train_flops_per_sample(_tiny()) == 3 * 2 * (linear + attention) == 2_752_512


def test_a_later_token_never_changes_earlier_logits() -> None:
    spec = _tiny()
    inputs, _ = spec.make_batch(2, torch.Generator().manual_seed(1))
    changed = inputs.clone()
    changed[:, 10] = (changed[:, 10] + 1) % PRESETS["tiny"].vocab
    with torch.no_grad():
        before, after = spec.blocks(inputs), spec.blocks(changed)
    torch.testing.assert_close(after[:, :10], before[:, :10], rtol=0, atol=0)
    assert (after[:, 10:] - before[:, 10:]).abs().amax(dim=-1).min() > 0  # every later position sees it


def test_the_loss_is_the_token_mean_and_equal_shards_average_to_it() -> None:
    spec = _tiny()
    inputs, targets = spec.make_batch(8, torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = spec.blocks(inputs)
    loss = spec.loss_fn(logits, targets)
    per_token = -logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(loss, per_token.mean())
    for shards in (2, 4):
        parts = [spec.loss_fn(lg, tg) for lg, tg in zip(logits.chunk(shards), targets.chunk(shards), strict=True)]
        torch.testing.assert_close(torch.stack(parts).mean(), loss)
    assert TokenCrossEntropy().reduction == "mean"


def test_tiny_plan_shards_every_decoder_block_and_nothing_else() -> None:
    plan = _tiny().tp_plan
    assert plan is not None
    assert plan.styles == {
        f"{i}.{path}": style
        for i in (1, 2)
        for path, style in (("attn.q", "colwise"), ("attn.k", "colwise"), ("attn.v", "colwise"),
                            ("attn.out", "rowwise"), ("mlp.fc1", "colwise"), ("mlp.fc2", "rowwise"))
    }
    assert plan.sharded_dims == {"attention heads": 2, "mlp hidden width": 128}
    plan.check_degree(2)
    with pytest.raises(ValueError, match="degree 4 does not divide attention heads 2$"):
        plan.check_degree(4)


# --- what column-then-row tensor parallelism relies on, on plain tensors ---------------------


def _columns(layer: nn.Linear, cols: torch.Tensor) -> nn.Linear:
    """The rank's share of a column-wise layer: its output features ``cols`` (rows of the weight)."""
    part = nn.Linear(layer.in_features, len(cols))
    part.weight.data, part.bias.data = layer.weight[cols].clone(), layer.bias[cols].clone()
    return part


def _rows(layer: nn.Linear, cols: torch.Tensor) -> nn.Linear:
    """The rank's share of a row-wise layer: its input features ``cols``, no bias (added once, after the sum)."""
    part = nn.Linear(len(cols), layer.out_features, bias=False)
    part.weight.data = layer.weight[:, cols].clone()
    return part


def _shard(module: nn.Module, colwise: tuple[str, ...], rowwise: str, cols: torch.Tensor) -> nn.Module:
    part = copy.deepcopy(module)
    for name in colwise:
        setattr(part, name, _columns(getattr(module, name), cols))
    setattr(part, rowwise, _rows(getattr(module, rowwise), cols))
    return part


def _contiguous(rank: int, degree: int, features: int) -> torch.Tensor:
    """What ColwiseParallel gives rank ``rank``: the ``rank``-th of ``degree`` equal blocks of features."""
    share = features // degree
    return torch.arange(rank * share, (rank + 1) * share)


@pytest.mark.parametrize("degree", [2, 4])
def test_attention_sharded_by_heads_sums_to_the_whole(degree: int) -> None:
    torch.manual_seed(0)
    attn = CausalSelfAttention(width=32, heads=4)
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        whole = attn(x)
        parts = [_shard(attn, ("q", "k", "v"), "out", _contiguous(r, degree, 32))(x) for r in range(degree)]
        # Each rank's q gives 32 / degree features, so it runs 4 / degree heads, found from the width alone.
        torch.testing.assert_close(sum(parts) + attn.out.bias, whole)
        # The same count of features, but interleaved: each local "head" mixes two real heads' features,
        # so its attention weights are wrong and the sum no longer adds up. Shards must hold whole heads.
        mixed = [_shard(attn, ("q", "k", "v"), "out", torch.arange(r, 32, degree))(x) for r in range(degree)]
        assert (sum(mixed) + attn.out.bias - whole).abs().max() > 1e-3


def test_mlp_sharded_by_hidden_columns_sums_to_the_whole() -> None:
    torch.manual_seed(0)
    mlp = MLP(width=32)
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        parts = [_shard(mlp, ("fc1",), "fc2", _contiguous(r, 2, 128))(x) for r in range(2)]
        torch.testing.assert_close(sum(parts) + mlp.fc2.bias, mlp(x))


def test_single_trains_the_tiny_transformer(tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(model="transformer", preset="tiny", steps=6, warmup=0, lr=0.5,
                                          out=str(tmp_path / "r.jsonl")))
    losses = global_losses(train(config).ranks)
    assert len(losses) == 6
    # Random tokens start near log(64) = 4.16 nats. Batches differ by ~0.1 nats, so a drop of 0.3 is
    # learning: lr 0.5 gives 4.39 -> 3.88, while lr 0.01 ends at 4.31.
    assert abs(losses[0] - torch.log(torch.tensor(64.0)).item()) < 0.5
    assert losses[-1] < losses[0] - 0.3


def test_loss_module_matches_torch_cross_entropy_on_flattened_tokens() -> None:
    logits, targets = torch.randn(3, 5, 7), torch.randint(7, (3, 5))
    torch.testing.assert_close(TokenCrossEntropy()(logits, targets),
                               F.cross_entropy(logits.reshape(15, 7), targets.reshape(15)))
