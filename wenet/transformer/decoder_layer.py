"""One attention-decoder block: masked self-attention, source attention, feed-forward."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from wenet.transformer.positionwise_feed_forward import PositionwiseFeedForward


class DecoderLayer(torch.nn.Module):
    """Transformer decoder block with residuals; pre-norm when normalize_before.

    With ``cache`` (this layer's outputs for the previous positions, (B, L-1, D))
    only the last position is computed and appended, for step-by-step search.
    """

    def __init__(self, size: int, self_attn: torch.nn.Module, src_attn: torch.nn.Module,
                 feed_forward: PositionwiseFeedForward, dropout_rate: float,
                 normalize_before: bool = True):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.norm1 = torch.nn.LayerNorm(size, eps=1e-5)
        self.norm2 = torch.nn.LayerNorm(size, eps=1e-5)
        self.norm3 = torch.nn.LayerNorm(size, eps=1e-5)
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.normalize_before = normalize_before

    def forward(self, tgt: torch.Tensor, tgt_mask: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor, cache: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """tgt (B, L, D), tgt_mask (B, L, L), memory (B, T, D), memory_mask (B, 1, T).

        Returns (out (B, L, D), tgt_mask, memory, memory_mask).
        """
        residual = tgt
        if self.normalize_before:
            tgt = self.norm1(tgt)
        if cache is None:
            tgt_q = tgt
            tgt_q_mask = tgt_mask
        else:
            tgt_q = tgt[:, -1:, :]
            residual = residual[:, -1:, :]
            tgt_q_mask = tgt_mask[:, -1:, :]
        x = residual + self.dropout(self.self_attn(tgt_q, tgt, tgt, tgt_q_mask)[0])
        if not self.normalize_before:
            x = self.norm1(x)

        residual = x
        if self.normalize_before:
            x = self.norm2(x)
        x = residual + self.dropout(self.src_attn(x, memory, memory, memory_mask)[0])
        if not self.normalize_before:
            x = self.norm2(x)

        residual = x
        if self.normalize_before:
            x = self.norm3(x)
        x = residual + self.dropout(self.feed_forward(x))
        if not self.normalize_before:
            x = self.norm3(x)

        if cache is not None:
            x = torch.cat([cache, x], dim=1)
        return x, tgt_mask, memory, memory_mask
