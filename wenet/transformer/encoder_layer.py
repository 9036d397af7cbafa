"""One encoder block: Transformer (attention + FFN) or Conformer (macaron FFN, attention, conv, FFN).

Every sub-block is wrapped the same way: its output goes through dropout (times a
scale) and is added to its input; ``normalize_before`` puts the sub-block's
LayerNorm on its input (pre-norm), otherwise on the sum (post-norm).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from wenet.transformer.convolution import ConvolutionModule
from wenet.transformer.positionwise_feed_forward import PositionwiseFeedForward


class _ResidualLayer(torch.nn.Module):
    """What both blocks share: self-attention, dropout, the norm placement and the residual
    add. The LayerNorms stay attributes of each block (their names are WeNet's state_dict
    names); a TorchScript method cannot take a module as argument, so each block applies
    its own norms around ``residual``."""

    def __init__(self, size: int, self_attn: torch.nn.Module, dropout_rate: float,
                 normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.size = size
        self.normalize_before = normalize_before

    def residual(self, x: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """x + scale · dropout(out): a sub-block's output added to its input."""
        return x + scale * self.dropout(out)


class TransformerEncoderLayer(_ResidualLayer):
    """Self-attention and feed-forward, each with a residual; pre-norm when normalize_before."""

    def __init__(self, size: int, self_attn: torch.nn.Module,
                 feed_forward: PositionwiseFeedForward, dropout_rate: float,
                 normalize_before: bool = True):
        super().__init__(size, self_attn, dropout_rate, normalize_before)
        self.feed_forward = feed_forward
        self.norm1 = torch.nn.LayerNorm(size, eps=1e-5)
        self.norm2 = torch.nn.LayerNorm(size, eps=1e-5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                mask_pad: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool),
                att_cache: torch.Tensor = torch.zeros((0, 0, 0, 0)),
                cnn_cache: torch.Tensor = torch.zeros((0, 0, 0, 0))
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D), mask (B, T|1, T) → (x, mask, new_att_cache, empty cnn cache)."""
        pre = self.normalize_before
        h = self.norm1(x) if pre else x
        h, new_att_cache = self.self_attn(h, h, h, mask, pos_emb, att_cache)
        x = self.residual(x, h)
        x = x if pre else self.norm1(x)
        h = self.norm2(x) if pre else x
        x = self.residual(x, self.feed_forward(h))
        x = x if pre else self.norm2(x)
        fake_cnn_cache = torch.zeros((0, 0, 0), dtype=x.dtype, device=x.device)
        return x, mask, new_att_cache, fake_cnn_cache


class ConformerEncoderLayer(_ResidualLayer):
    """Conformer block: ½·FFN (macaron), self-attention, convolution, ½·FFN, final LayerNorm.

    Without a macaron FFN the single FFN gets full weight; without a conv
    module the block is a Transformer layer with pre/post norms.
    """

    def __init__(self, size: int, self_attn: torch.nn.Module,
                 feed_forward: Optional[PositionwiseFeedForward] = None,
                 feed_forward_macaron: Optional[PositionwiseFeedForward] = None,
                 conv_module: Optional[ConvolutionModule] = None,
                 dropout_rate: float = 0.1, normalize_before: bool = True):
        super().__init__(size, self_attn, dropout_rate, normalize_before)
        self.feed_forward = feed_forward
        self.feed_forward_macaron = feed_forward_macaron
        self.conv_module = conv_module
        self.norm_ff = torch.nn.LayerNorm(size, eps=1e-5)
        self.norm_mha = torch.nn.LayerNorm(size, eps=1e-5)
        if feed_forward_macaron is not None:
            self.norm_ff_macaron = torch.nn.LayerNorm(size, eps=1e-5)
            self.ff_scale = 0.5
        else:
            self.ff_scale = 1.0
        if conv_module is not None:
            self.norm_conv = torch.nn.LayerNorm(size, eps=1e-5)
            self.norm_final = torch.nn.LayerNorm(size, eps=1e-5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                mask_pad: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool),
                att_cache: torch.Tensor = torch.zeros((0, 0, 0, 0)),
                cnn_cache: torch.Tensor = torch.zeros((0, 0, 0, 0))
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D), mask (B, T|1, T), mask_pad (B, 1, T) for the conv.

        Returns (x, mask, new_att_cache (1, H, cache+T, 2*d_k), new_cnn_cache (B, D, k-1)).
        """
        pre = self.normalize_before
        if self.feed_forward_macaron is not None:
            h = self.norm_ff_macaron(x) if pre else x
            x = self.residual(x, self.feed_forward_macaron(h), self.ff_scale)
            x = x if pre else self.norm_ff_macaron(x)

        h = self.norm_mha(x) if pre else x
        h, new_att_cache = self.self_attn(h, h, h, mask, pos_emb, att_cache)
        x = self.residual(x, h)
        x = x if pre else self.norm_mha(x)

        new_cnn_cache = torch.zeros((0, 0, 0), dtype=x.dtype, device=x.device)
        if self.conv_module is not None:
            h = self.norm_conv(x) if pre else x
            h, new_cnn_cache = self.conv_module(h, mask_pad, cnn_cache)
            x = self.residual(x, h)
            x = x if pre else self.norm_conv(x)

        if self.feed_forward is not None:
            h = self.norm_ff(x) if pre else x
            x = self.residual(x, self.feed_forward(h), self.ff_scale)
            x = x if pre else self.norm_ff(x)

        if self.conv_module is not None:
            x = self.norm_final(x)
        return x, mask, new_att_cache, new_cnn_cache
