"""Zipformer stacks: blocks that run at 1/ds of the 50 Hz frame rate, with learnt
down- and upsampling and a learnt per-channel bypass around the whole stack.

Frame counts. A sequence of T valid frames at 50 Hz has ceil(T / ds) frames in a
stack of factor ds; the last group of ds frames is completed by repeating the
sequence's last valid frame (per utterance, so padding in a batch never reaches a
valid frame). Streaming chunks have a multiple of ds frames, except the last one.
"""
from __future__ import annotations

from typing import List, Tuple

import torch

from wenet.utils.mask import subsequent_chunk_mask
from wenet.zipformer.attention import CompactRelPositionalEncoding
from wenet.zipformer.block import BypassModule, ZipformerEncoderLayer
from wenet.zipformer.scaling import ScheduledFloat


def frames_at(lengths: torch.Tensor, factor: int) -> torch.Tensor:
    """Frames at 1/factor of the rate for sequences of ``lengths`` frames: ceil."""
    return (lengths + factor - 1) // factor


class SimpleDownsample(torch.nn.Module):
    """Each group of ``factor`` frames -> their weighted sum, weights softmax(learnt)."""

    def __init__(self, factor: int):
        super().__init__()
        self.factor = factor
        if factor > 1:
            self.bias = torch.nn.Parameter(torch.zeros(factor))
        else:  # nothing to learn (a parameter DDP would find unused)
            self.register_buffer("bias", torch.zeros(1), persistent=False)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x (B, T, C), lengths (B,) -> (B, ceil(T / factor), C); frames from
        lengths[b] on are replaced by utterance b's last valid frame first."""
        b, t, c = x.shape
        d = self.factor
        t_out = (t + d - 1) // d
        last = (lengths - 1).clamp(min=0).unsqueeze(1)
        index = torch.minimum(torch.arange(t_out * d, device=x.device).unsqueeze(0), last)
        x = torch.gather(x, 1, index.unsqueeze(2).expand(b, t_out * d, c))
        weights = torch.softmax(self.bias, dim=0).to(x.dtype)
        return (x.reshape(b, t_out, d, c) * weights.unsqueeze(1)).sum(dim=2)


class SimpleUpsample(torch.nn.Module):
    """Each frame repeated ``factor`` times, cut to ``length`` frames."""

    def __init__(self, factor: int):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor, length: int) -> torch.Tensor:
        b, t, c = x.shape
        x = x.unsqueeze(2).expand(b, t, self.factor, c).reshape(b, t * self.factor, c)
        return x[:, :length]


def convert_num_channels(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x (..., C) -> (..., dim): extra channels cut, missing ones zero."""
    c = x.size(-1)
    if c == dim:
        return x
    if c > dim:
        return x[..., :dim]
    pad = torch.zeros(x.shape[:-1] + (dim - c,), dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=-1)


def full_dim_output(outputs: List[torch.Tensor]) -> torch.Tensor:
    """The stacks' outputs (B, T, C_i) -> (B, T, max C_i): the last stack's output,
    extended by the channels only a wider stack has, taken from the latest such stack."""
    out = outputs[-1]
    parts = [out]
    dim = out.size(-1)
    for x in outputs[-2::-1]:
        if x.size(-1) > dim:
            parts.append(x[..., dim:])
            dim = x.size(-1)
    return torch.cat(parts, dim=-1) if len(parts) > 1 else out


class ZipformerStack(torch.nn.Module):
    """``num_layers`` blocks of ``dim`` channels at 1/``factor`` of the 50 Hz rate.

    forward(x (B, T, dim) at 50 Hz, lengths (B,), offset (1,) int64 (50 Hz frames
    before x, for streaming), chunk_size (50 Hz frames, < 0 none), left_chunks,
    att_cache (layers, B, n, width), conv_cache (layers, B, kernel-1 or 0, 2 dim))
    -> (out (B, T, dim), att_cache (layers, B, n + T', width), conv_cache); with
    keep_cache False (a whole utterance) the given caches come back.
    Cached frames sit at positions offset / factor - n .. offset / factor - 1; those
    below 0 (unfilled slots of a fixed-size cache) are masked.
    """

    def __init__(self, factor: int, num_layers: int, dim: int, unmasked_dim: int,
                 pos_dim: int, layer_options: dict, schedule_scale: float = 1.0):
        super().__init__()
        self.factor = factor
        self.dim = dim
        self.unmasked_dim = unmasked_dim
        self.feature_mask_prob = 0.125
        self.pos = CompactRelPositionalEncoding(pos_dim, dropout_rate=0.15)
        self.layers = torch.nn.ModuleList([
            ZipformerEncoderLayer(dim, pos_dim=pos_dim, schedule_scale=schedule_scale,
                                  **layer_options)
            for _ in range(num_layers)])
        self.downsample = SimpleDownsample(factor)
        self.upsample = SimpleUpsample(factor)
        self.out_combiner = BypassModule(dim, ScheduledFloat((0.0, 0.0)))
        self.cache_width = self.layers[0].cache_width
        self.conv_lorder = self.layers[0].conv_lorder

    def _feature_mask(self, x: torch.Tensor) -> torch.Tensor:
        """Training only: ones, except that the channels from unmasked_dim on are zero
        in a random share feature_mask_prob of the frames."""
        keep = (torch.rand(x.size(0), x.size(1), 1, device=x.device)
                >= self.feature_mask_prob).to(x.dtype)
        ones = torch.ones(x.size(0), x.size(1), self.unmasked_dim, dtype=x.dtype,
                          device=x.device)
        return torch.cat([ones, keep.expand(-1, -1, x.size(2) - self.unmasked_dim)], dim=2)

    def _masks(self, lengths: torch.Tensor, t: int, n: int, offset: torch.Tensor,
               chunk_size: int, left_chunks: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(attention mask (B|1, t, n + t), valid (B, t, 1)) at this stack's rate."""
        valid = torch.arange(t, device=lengths.device).unsqueeze(0) < frames_at(
            lengths, self.factor).unsqueeze(1)
        cached = torch.arange(n, device=lengths.device) - n + offset // self.factor >= 0
        keys = torch.cat([cached.unsqueeze(0).expand(valid.size(0), n), valid], dim=1)
        mask = keys.unsqueeze(1)
        if chunk_size > 0:
            chunk = subsequent_chunk_mask(t, chunk_size // self.factor, left_chunks,
                                          lengths.device)
            mask = mask & chunk.unsqueeze(0)
        return mask, valid.unsqueeze(2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, offset: torch.Tensor,
                chunk_size: int, left_chunks: int, att_cache: torch.Tensor,
                conv_cache: torch.Tensor, keep_cache: bool = True
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        orig = x
        if self.factor > 1:
            x = self.downsample(x, lengths)
        t, n = x.size(1), att_cache.size(2)
        mask, valid = self._masks(lengths, t, n, offset, chunk_size, left_chunks)
        pos_emb = self.pos(t, n + t, x)
        use_mask = self.training and self.unmasked_dim < self.dim
        feature_mask = self._feature_mask(x) if use_mask else x
        if use_mask:
            x = x * feature_mask
        att_caches: List[torch.Tensor] = []
        conv_caches: List[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x, layer_att, layer_conv = layer(x, pos_emb, mask, valid, att_cache[i],
                                             conv_cache[i], keep_cache)
            att_caches.append(layer_att)
            conv_caches.append(layer_conv)
        if use_mask:
            x = x * feature_mask
        if self.factor > 1:
            x = self.upsample(x, orig.size(1))
        x = self.out_combiner(orig, x)
        return x, torch.stack(att_caches, dim=0), torch.stack(conv_caches, dim=0)
