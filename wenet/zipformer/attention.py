"""Zipformer attention: a compact relative positional encoding, attention weights computed
once per block, and the two modules that share them (SelfAttention, NonlinAttention).

Every module takes a cache of earlier frames (``cache`` (B, n, width), n = 0 for a whole
utterance) that is put before the current frames as keys/values, and returns the
concatenation (B, n + T, width) when asked, so that one code path serves the full
forward and the chunk-by-chunk streaming step.

Masks are bool with True = may attend: ``mask`` (B or 1, T_query, T_key).
"""
from __future__ import annotations

import math
from typing import Tuple

import torch

from wenet.zipformer.scaling import Whiten




class CompactRelPositionalEncoding(torch.nn.Module):
    """Sinusoids of a compressed relative position: r -> c * sign(r) * log(1 + |r| / c)
    (c = sqrt(dim)), mapped through atan to (-pi/2, pi/2) and taken at dim/2 frequencies.

    Far positions are squeezed together, so the encoding of any relative offset is
    defined without a table; the last channel is a constant 1 (a learnable bias after
    the projection). ``forward(num_queries, num_keys)`` gives the rows for relative
    positions 1 - num_queries .. num_keys - 1 (query i sits at key position
    num_keys - num_queries + i), shape (num_queries + num_keys - 1, dim).
    """

    def __init__(self, dim: int, dropout_rate: float = 0.0, length_factor: float = 1.0):
        super().__init__()
        if dim % 2 != 0 or dim < 4:
            raise ValueError(f"pos_dim must be even and >= 4, got {dim}")
        self.dim = dim
        self.length_factor = length_factor
        self.dropout = torch.nn.Dropout(dropout_rate)

    def encode(self, rel: torch.Tensor) -> torch.Tensor:
        """Float relative positions (R,) -> (R, dim)."""
        c = math.sqrt(self.dim)
        compressed = c * rel.sign() * torch.log1p(rel.abs() / c)
        angle = torch.atan(compressed / (self.length_factor * self.dim / (2.0 * math.pi)))
        freqs = torch.arange(1, self.dim // 2 + 1, device=rel.device, dtype=rel.dtype)
        phase = angle.unsqueeze(1) * freqs
        pe = torch.stack([phase.cos(), phase.sin()], dim=-1).reshape(rel.size(0), self.dim)
        return torch.cat([pe[:, :-1], torch.ones_like(pe[:, -1:])], dim=1)

    def forward(self, num_queries: int, num_keys: int, like: torch.Tensor) -> torch.Tensor:
        """The rows, on the device and in the dtype of ``like`` (computed in float32 at
        least: positions past 2048 are not integers in float16)."""
        dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
        rel = torch.arange(1 - num_queries, num_keys, device=like.device).to(dtype)
        return self.dropout(self.encode(rel).to(like.dtype))


def relative_index(num_queries: int, num_keys: int, device: torch.device) -> torch.Tensor:
    """(Tq, Tk) row of ``CompactRelPositionalEncoding`` for each (query, key) pair."""
    q = torch.arange(num_queries, device=device).unsqueeze(1)
    k = torch.arange(num_keys, device=device).unsqueeze(0)
    return q - k + (num_keys - 1)


def relative_scores(pos_scores: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Position scores (B, H, Tq, Tq + Tk - 1) against the rows of
    ``CompactRelPositionalEncoding`` -> (B, H, Tq, Tk), the score of each (query, key)
    pair (``relative_index``), by a gather."""
    b, h, tq, _ = pos_scores.shape
    index = relative_index(tq, num_keys, pos_scores.device).expand(b, h, tq, num_keys)
    return torch.gather(pos_scores, 3, index)


@torch.jit.unused
def relative_scores_reversed(pos_scores: torch.Tensor, num_keys: int) -> torch.Tensor:
    """The same as ``relative_scores`` for scores against the rows in *reverse* order
    (relative positions Tk - 1 down to 1 - Tq), as a strided view instead of a gather:
    query i's keys sit at row Tq - 1 - i + k, so the view starts at Tq - 1 and steps
    Tq + Tk - 2 per query. No index tensor and no scatter in the backward; eager only (the
    exports keep the gather, which ONNX has)."""
    pos_scores = pos_scores.contiguous()
    b, h, tq, width = pos_scores.shape
    return pos_scores.as_strided((b, h, tq, num_keys), (h * tq * width, tq * width, width - 1, 1),
                                 pos_scores.storage_offset() + tq - 1)


def cat_cache(cache: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Earlier frames (B, n, D) before the current ones (B, T, D); n may be 0."""
    if cache.size(1) == 0:
        return x
    return torch.cat([cache.to(x.dtype), x], dim=1)


class RelPositionMultiheadAttentionWeights(torch.nn.Module):
    """Attention weights (B, H, Tq, Tk) from content scores q.k / sqrt(query_head_dim)
    plus position scores p.P(i - j) / sqrt(pos_head_dim), where p is a separate
    per-head query of ``pos_head_dim`` and P the projected positional encoding."""

    def __init__(self, embed_dim: int, pos_dim: int, num_heads: int, query_head_dim: int,
                 pos_head_dim: int, dropout: float = 0.0, use_whiten: bool = False,
                 whiten_probs: Tuple[float, float] = (1.0, 1.0)):
        super().__init__()
        self.num_heads = num_heads
        self.query_head_dim = query_head_dim
        self.pos_head_dim = pos_head_dim
        self.key_dim = num_heads * query_head_dim
        self.in_proj = torch.nn.Linear(
            embed_dim, 2 * self.key_dim + num_heads * pos_head_dim)
        self.linear_pos = torch.nn.Linear(pos_dim, num_heads * pos_head_dim, bias=False)
        self.dropout = dropout
        self.whiten_keys = Whiten(use_whiten, limit=4.0, min_prob=whiten_probs[0],
                                  max_prob=whiten_probs[1])

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, mask: torch.Tensor,
                key_cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, Tq, C), pos_emb (Tq + Tk - 1, pos_dim), mask (B|1, Tq, Tk), key_cache
        (B, n, H*dq) with Tk = n + Tq -> (weights (B, H, Tq, Tk), keys (B, Tk, H*dq))."""
        b, tq, _ = x.shape
        h = self.num_heads
        proj = self.in_proj(x)
        # the score scales go on the (small) queries rather than on the (B, H, Tq, Tk) scores
        q = proj[..., :self.key_dim] * (self.query_head_dim ** -0.5)
        keys = cat_cache(key_cache, self.whiten_keys(proj[..., self.key_dim:2 * self.key_dim]))
        p = proj[..., 2 * self.key_dim:] * (self.pos_head_dim ** -0.5)
        tk = keys.size(1)
        q = q.reshape(b, tq, h, self.query_head_dim).transpose(1, 2)
        k = keys.reshape(b, tk, h, self.query_head_dim).permute(0, 2, 3, 1)
        scores = torch.matmul(q, k)
        p = p.reshape(b, tq, h, self.pos_head_dim).transpose(1, 2)
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            pos_scores = relative_scores_reversed(self._pos_scores(p, pos_emb.flip(0)), tk)
        else:
            pos_scores = relative_scores(self._pos_scores(p, pos_emb), tk)
        blocked = ~mask.unsqueeze(1)
        scores = (scores + pos_scores).masked_fill(blocked, -10000.0)  # exp() is 0; fits fp16
        weights = torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0)
        if self.dropout > 0.0:
            weights = torch.nn.functional.dropout(weights, p=self.dropout, training=self.training)
        return weights, keys

    def _pos_scores(self, p: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """Per-head position queries p (B, H, Tq, pos_head_dim) against every row of the
        positional encoding (R, pos_dim) -> (B, H, Tq, R)."""
        pos = self.linear_pos(pos_emb).reshape(-1, self.num_heads, self.pos_head_dim)
        return torch.matmul(p, pos.permute(1, 2, 0).unsqueeze(0))


class SelfAttention(torch.nn.Module):
    """Values (``value_head_dim`` per head) weighted by given attention weights."""

    def __init__(self, embed_dim: int, num_heads: int, value_head_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.value_head_dim = value_head_dim
        self.value_dim = num_heads * value_head_dim
        self.in_proj = torch.nn.Linear(embed_dim, self.value_dim)
        self.out_proj = torch.nn.Linear(self.value_dim, embed_dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, value_cache: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, Tq, C), weights (B, H, Tq, Tk), value_cache (B, Tk - Tq, H*dv) ->
        (out (B, Tq, C), values (B, Tk, H*dv))."""
        b, tq, _ = x.shape
        values = cat_cache(value_cache, self.in_proj(x))
        v = values.reshape(b, values.size(1), self.num_heads, self.value_head_dim).transpose(1, 2)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, tq, self.value_dim)
        return self.out_proj(out), values


class NonlinAttention(torch.nn.Module):
    """Non-linear attention: x -> (s, v, y); the values tanh(s) * v are averaged with
    one head of the block's attention weights, multiplied by y and projected back."""

    def __init__(self, embed_dim: int, hidden_dim: int):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.in_proj = torch.nn.Linear(embed_dim, 3 * hidden_dim)
        self.out_proj = torch.nn.Linear(hidden_dim, embed_dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, value_cache: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, Tq, C), weights (B, Tq, Tk) (one head), value_cache (B, Tk - Tq, hidden)
        -> (out (B, Tq, C), values (B, Tk, hidden))."""
        s, v, y = self.in_proj(x).chunk(3, dim=-1)
        values = cat_cache(value_cache, torch.tanh(s) * v)
        out = torch.matmul(weights, values) * y
        return self.out_proj(out), values
