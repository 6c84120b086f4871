"""``transformer``: a small GPT-like decoder (pre-norm, causal, learned positions) on synthetic token sequences.

Blocks: ``[embeddings, decoder block x depth, head]``, so a balance list cuts it between decoder
blocks like any other family. Only nn.Linear, nn.Embedding and nn.LayerNorm hold weights, and the
projections keep their own names (``attn.q``, ``attn.k``, ``attn.v``, ``attn.out``, ``mlp.fc1``,
``mlp.fc2``), so a tensor-parallel plan can name them (``tp_plan`` below).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.spec import COLWISE, ROWWISE, ModelSpec, TensorParallelPlan


@dataclass(frozen=True)
class TransformerPreset:
    vocab: int
    """Token vocabulary size (inputs and logits)."""
    width: int
    """Model width d: embeddings, attention and residual stream."""
    heads: int
    """Attention heads; each is width // heads wide."""
    depth: int
    """Decoder blocks."""
    seq_len: int
    """Tokens per sequence (and learned positions)."""
    batch_size: int
    """Default global batch, in sequences."""


# Parameters: 12 d^2 + 13 d per decoder block, (vocab + seq_len) d embeddings, 2 d + (d + 1) vocab head.
PRESETS = {
    # 30,144 parameters.
    "tiny": TransformerPreset(vocab=64, width=32, heads=2, depth=2, seq_len=16, batch_size=8),
    # 3,701,248 parameters: a step of batch 16 (1,024 tokens) took 144 ms on 2 CPU cores (bench run, torch 2.14).
    "small": TransformerPreset(vocab=1024, width=256, heads=4, depth=4, seq_len=64, batch_size=16),
    # 737,504,512 parameters (GPT-2 large's size, wider and shallower). fp32 weights, gradients and AdamW's
    # two moments are 16 B a parameter, 11.8 GB; the activations kept for backward, about 17 d floats a token
    # per block plus 3 x vocab for the logits, are ~2 MB a token, ~35 GB for 16 x 1024 tokens in fp32
    # (counted, not measured): one 141 GB H200 holds a step with room to spare.
    "large": TransformerPreset(vocab=32_000, width=2048, heads=16, depth=12, seq_len=1024, batch_size=16),
}


class Embeddings(nn.Module):
    """Token embedding plus a learned position embedding."""

    def __init__(self, vocab: int, width: int, seq_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq_len, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.tokens(ids) + self.positions(positions)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with separate q, k, v and out projections.

    The number of heads is read from q's output at run time, not stored: with q, k, v sharded
    column-wise over t ranks (Megatron-LM, Shoeybi et al. 2019), each rank's q gives width / t
    features, i.e. heads / t whole heads, which it attends over on its own; ``out``, sharded
    row-wise, then sums the ranks' partial outputs.
    """

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by {heads} heads")
        self.head_dim = width // heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(n, seq, h * head_dim) -> (n, h, seq, head_dim)."""
        n, seq, features = x.shape
        return x.view(n, seq, features // self.head_dim, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, seq, _ = x.shape
        y = F.scaled_dot_product_attention(self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x)),
                                           is_causal=True)
        return self.out(y.transpose(1, 2).reshape(n, seq, -1))


class MLP(nn.Module):
    """Linear d -> 4d, GELU, Linear 4d -> d."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    """Final LayerNorm and the projection to the vocabulary's logits."""

    def __init__(self, width: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.proj = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.ln(x))


class TokenCrossEntropy(nn.Module):
    """Cross-entropy over every token: logits (n, seq, vocab) and targets (n, seq) to one mean.

    A token mean, not a mean of per-sequence means: every sequence has seq_len tokens, so equal
    shards of the batch hold equal token counts, and the average of the shards' means is the
    global mean, which is what data-parallel and pipelined strategies rely on.
    """

    reduction = "mean"
    """Checked by ModelSpec: the only reduction under which shard losses average to the batch's."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def tp_plan(depth: int, heads: int, width: int) -> TensorParallelPlan:
    """Megatron-LM's split of each decoder block: q, k, v and fc1 by columns, out and fc2 by rows, so each
    block needs one all-reduce after attention and one after the MLP; embeddings, LayerNorms and the head
    stay replicated. Block 0 is the embeddings: the decoder blocks are blocks 1 to ``depth``."""
    styles: dict[str, str] = {}
    for i in range(1, depth + 1):
        styles |= {f"{i}.attn.{name}": COLWISE for name in ("q", "k", "v")}
        styles |= {f"{i}.attn.out": ROWWISE, f"{i}.mlp.fc1": COLWISE, f"{i}.mlp.fc2": ROWWISE}
    return TensorParallelPlan(styles, {"attention heads": heads, "mlp hidden width": 4 * width})


def build(preset: str, norm: str = "batch") -> ModelSpec:
    """Builds the decoder of ``preset``; ``norm`` is accepted for a uniform signature and ignored."""
    p = PRESETS[preset]
    blocks: list[nn.Module] = [Embeddings(p.vocab, p.width, p.seq_len)]
    blocks += [DecoderBlock(p.width, p.heads) for _ in range(p.depth)]
    blocks.append(Head(p.width, p.vocab))

    def make_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        # One random sequence of seq_len + 1 tokens per sample; the target of each position is the next
        # token, as in language modelling (random tokens: the loss stays near log(vocab), which is fine
        # for timing and for comparing strategies).
        tokens = torch.randint(p.vocab, (n, p.seq_len + 1), generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return ModelSpec("transformer", nn.Sequential(*blocks), make_batch, TokenCrossEntropy(), p.batch_size,
                     tp_plan(p.depth, p.heads, p.width))
