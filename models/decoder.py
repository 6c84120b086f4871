"""Decoder-only language models from published dimensions (Llama, MPT, GPT-style), for counting on the meta device.

``transformer.py``'s presets are the suite's own small GPT (its tests depend on them, bit for bit); this
builds any decoder a published row describes: grouped-query attention (``kv_heads`` below ``heads``),
a SwiGLU (three matrices) or GELU (two) MLP, RMSNorm or LayerNorm, RoPE, ALiBi or learned positions. Built
under ``torch.device("meta")`` nothing is allocated: Llama 3.1 8B's 8.03 B parameters are shapes only.
No bias anywhere (Llama and MPT have none); embeddings and the head are separate matrices (untied).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

FFN_KINDS = ("swiglu", "gelu")
NORMS = ("rms", "layer")
POSITIONS = ("rope", "alibi", "learned")


@dataclass(frozen=True)
class DecoderDims:
    """A decoder's published dimensions (the ``dims`` column of ../shared/published/train.csv)."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    """Grouped-query attention where below ``heads``: k and v are kv_heads x head_dim wide."""
    ffn: int
    """The MLP's hidden size."""
    ffn_kind: str
    norm: str
    positions: str
    vocab: int
    seq_len: int

    def __post_init__(self) -> None:
        checks = [(self.ffn_kind in FFN_KINDS, f"ffn_kind {self.ffn_kind!r}; choose from {', '.join(FFN_KINDS)}"),
                  (self.norm in NORMS, f"norm {self.norm!r}; choose from {', '.join(NORMS)}"),
                  (self.positions in POSITIONS, f"positions {self.positions!r}; choose from {', '.join(POSITIONS)}"),
                  (self.width % self.heads == 0, f"width {self.width} is not divisible by {self.heads} heads"),
                  (self.heads % self.kv_heads == 0, f"{self.heads} heads do not divide into {self.kv_heads} kv heads")]
        bad = [message for ok, message in checks if not ok]
        if bad:
            raise ValueError("; ".join(bad))

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


def _norm(dims: DecoderDims) -> nn.Module:
    return nn.RMSNorm(dims.width) if dims.norm == "rms" else nn.LayerNorm(dims.width, bias=False)


class Attention(nn.Module):
    """Causal attention with ``kv_heads`` key/value heads shared by ``heads / kv_heads`` query heads each."""

    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.dims = dims
        self.q = nn.Linear(dims.width, dims.width, bias=False)
        self.k = nn.Linear(dims.width, dims.kv_width, bias=False)
        self.v = nn.Linear(dims.width, dims.kv_width, bias=False)
        self.out = nn.Linear(dims.width, dims.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, seq, _ = x.shape
        d = self.dims

        def heads(t: torch.Tensor, count: int) -> torch.Tensor:
            return t.view(n, seq, count, d.head_dim).transpose(1, 2).repeat_interleave(d.heads // count, dim=1)

        # Positions (RoPE's rotation, ALiBi's bias) change values, not shapes or parameters: left out here.
        y = F.scaled_dot_product_attention(heads(self.q(x), d.heads), heads(self.k(x), d.kv_heads),
                                           heads(self.v(x), d.kv_heads), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(n, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x); GELU: w2(gelu(w1 x))."""

    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.w1 = nn.Linear(dims.width, dims.ffn, bias=False)
        self.w3 = nn.Linear(dims.width, dims.ffn, bias=False) if dims.ffn_kind == "swiglu" else None
        self.w2 = nn.Linear(dims.ffn, dims.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is None:
            return self.w2(F.gelu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Layer(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.attention_norm, self.attention = _norm(dims), Attention(dims)
        self.mlp_norm, self.mlp = _norm(dims), FeedForward(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Embed(nn.Module):
    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.tokens = nn.Embedding(dims.vocab, dims.width)
        self.positions = nn.Embedding(dims.seq_len, dims.width) if dims.positions == "learned" else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        return x if self.positions is None else x + self.positions(torch.arange(ids.shape[1], device=ids.device))


def build_decoder(dims: DecoderDims) -> nn.Sequential:
    """``[embeddings, layer x layers, norm + head]``; build it under ``torch.device("meta")`` to count only."""
    return nn.Sequential(Embed(dims), *(Layer(dims) for _ in range(dims.layers)),
                         nn.Sequential(_norm(dims), nn.Linear(dims.width, dims.vocab, bias=False)))


def linear_shapes(module: nn.Module) -> list[tuple[int, int]]:
    """(in, out) of every nn.Linear: each costs 2 x in x out FLOPs per token forward."""
    return [(m.in_features, m.out_features) for m in module.modules() if isinstance(m, nn.Linear)]
