"""Multi-head attention, plain and with WeNet's relative-position term, on top of SDPA.

Masks are bool, True where a query may attend: (B, 1, T2) or (B, T1, T2); a mask
with size(2) == 0 means "no mask" (streaming with a single chunk). Caches hold
this layer's keys and values from earlier chunks as (1, H, cache_t, 2 * d_k).
"""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F


class MultiHeadedAttention(torch.nn.Module):
    """Scaled dot-product attention with ``n_head`` heads of size n_feat // n_head."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__()
        if n_feat % n_head != 0:
            raise ValueError(f"attention size {n_feat} is not divisible by {n_head} heads")
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = torch.nn.Linear(n_feat, n_feat)
        self.linear_k = torch.nn.Linear(n_feat, n_feat)
        self.linear_v = torch.nn.Linear(n_feat, n_feat)
        self.linear_out = torch.nn.Linear(n_feat, n_feat)
        self.dropout_rate = dropout_rate

    def forward_qkv(self, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split into heads: (B, T, D) → (B, H, T, d_k) each."""
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def _use_cache(self, k: torch.Tensor, v: torch.Tensor,
                   cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Prepend cached keys/values; return (k, v, new_cache = cat(k, v) on the last dim)."""
        if cache.size(0) > 0:
            key_cache, value_cache = torch.split(cache, cache.size(-1) // 2, dim=-1)
            k = torch.cat([key_cache, k], dim=2)
            v = torch.cat([value_cache, v], dim=2)
        return k, v, torch.cat((k, v), dim=-1)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d_k)) v over allowed keys, then linear_out.

        q and k may be wider than d_k (the relative-position attention appends
        its position term to both); the scale stays 1 / sqrt(d_k).
        A query row with no allowed key (a padded frame) gives 0 before
        linear_out, as WeNet's masked softmax does; such rows are unmasked for
        the kernel and zeroed afterwards, so no -inf-only row can make NaN in
        the forward or backward pass, whatever the dtype.
        """
        n_batch = q.size(0)
        dropout_p = self.dropout_rate if self.training else 0.0
        scale = 1.0 / math.sqrt(self.d_k)
        if mask.size(2) > 0:
            allowed = mask.unsqueeze(1)[:, :, :, :k.size(2)]  # (B, 1, T1|1, T2)
            empty_rows = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, T1|1, 1)
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | empty_rows,
                                               dropout_p=dropout_p, scale=scale)
            x = x.masked_fill(empty_rows, 0.0)
        else:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool),
                pos_emb: torch.Tensor = torch.empty(0),
                cache: torch.Tensor = torch.zeros((0, 0, 0, 0))
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """query (B, T1, D), key/value (B, T2, D) → (out (B, T1, D), new_cache).

        ``pos_emb`` is unused here (kept so both attention kinds share a signature).
        """
        q, k, v = self.forward_qkv(query, key, value)
        k, v, new_cache = self._use_cache(k, v, cache)
        return self._attend(q, k, v, mask), new_cache


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    """Transformer-XL style attention with learned biases u (content) and v (position).

    score[i, j] = ((q_i + u) · k_j + (q_i + v) · p_j) / sqrt(d_k), with
    p_j = linear_pos(PE[j]) the projected encoding of key position j. As in
    WeNet 2.x there is no rel-shift: keys carry their own position, which keeps
    chunk caches trivial (a cached key keeps its encoding) and WeNet checkpoints
    compatible. Both terms go to SDPA as one dot product: [q + u, q + v] · [k_j, p_j].
    """

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__(n_head, n_feat, dropout_rate)
        self.linear_pos = torch.nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = torch.nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = torch.nn.Parameter(torch.empty(self.h, self.d_k))
        torch.nn.init.xavier_uniform_(self.pos_bias_u)
        torch.nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool),
                pos_emb: torch.Tensor = torch.empty(0),
                cache: torch.Tensor = torch.zeros((0, 0, 0, 0))
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """query (B, T1, D), key/value (B, T2, D), pos_emb (1|B, T2 incl. cache, D) → (out, new_cache)."""
        q, k, v = self.forward_qkv(query, key, value)
        k, v, new_cache = self._use_cache(k, v, cache)
        n_batch_pos = pos_emb.size(0)
        p = self.linear_pos(pos_emb).view(n_batch_pos, -1, self.h, self.d_k).transpose(1, 2)
        # (q + u)·k_j + (q + v)·p_j as one dot product of width 2 d_k: the position
        # term rides in the same attention kernel, with no (B, H, T1, T2) bias tensor
        q_cat = torch.cat((q + self.pos_bias_u.unsqueeze(1), q + self.pos_bias_v.unsqueeze(1)), dim=-1)
        k_cat = torch.cat((k, p.expand(k.size(0), -1, -1, -1)), dim=-1)
        return self._attend(q_cat, k_cat, v, mask), new_cache
