"""One Zipformer block (ZipformerEncoderLayer) and its feed-forward, convolution and
bypass modules.

Module order inside a block (as in icefall's Zipformer2EncoderLayer): attention
weights (computed once) -> feed-forward 1 -> non-linear attention (head 0 of the
weights) -> self-attention 1 -> convolution 1 -> feed-forward 2 -> mid bypass ->
self-attention 2 (same weights) -> convolution 2 -> feed-forward 3 -> BiasNorm ->
bypass with the block's input. The modules have no norm of their own; the block ends
with BiasNorm, and each bypass mixes input and output with a learnt per-channel scale.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from wenet.zipformer.attention import (NonlinAttention, RelPositionMultiheadAttentionWeights,
                                       SelfAttention)
from wenet.zipformer.scaling import (Balancer, BiasNorm, ScheduledFloat, Whiten,
                                     limit_param_value, scheduled, shared_dropout, swoosh_l,
                                     swoosh_r)


def _shrink_init(linear: torch.nn.Linear, scale: float) -> torch.nn.Linear:
    """Scale a Linear's initial weights (and zero its bias): the output projections of
    the residual modules start small, as the Zipformer's do."""
    with torch.no_grad():
        linear.weight.mul_(scale)
        if linear.bias is not None:
            linear.bias.zero_()
    return linear


class FeedForward(torch.nn.Module):
    """Linear -> SwooshL -> dropout (scheduled; one mask per utterance shared over time,
    as icefall's feed-forward modules) -> Linear."""

    def __init__(self, dim: int, hidden: int, dropout: ScheduledFloat, use_balancers: bool,
                 balancer_prob: Optional[ScheduledFloat] = None):
        super().__init__()
        self.in_proj = torch.nn.Linear(dim, hidden)
        self.balancer = Balancer(use_balancers, min_positive=0.2, max_positive=1.0,
                                 min_abs=0.75, max_abs=5.0, prob=balancer_prob)
        self.out_proj = _shrink_init(torch.nn.Linear(hidden, dim), 0.1)
        self.dropout_p = 0.0
        scheduled(self, "dropout_p", dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = swoosh_l(self.balancer(self.in_proj(x)))
        h = shared_dropout(h, self.dropout_p, self.training)
        return self.out_proj(h)


class ConvolutionModule(torch.nn.Module):
    """Linear to 2C -> x * sigmoid(gate) -> depthwise conv over time -> SwooshR -> Linear.

    Padded frames are zeroed before the convolution. ``causal``: the convolution sees
    only the current and kernel - 1 earlier frames; ``cache`` (B, kernel - 1, C) holds
    those earlier frames (empty for a whole utterance: zeros, the left padding).
    """

    def __init__(self, dim: int, kernel_size: int, causal: bool, use_balancers: bool,
                 balancer_prob: Optional[ScheduledFloat] = None):
        super().__init__()
        if kernel_size < 3 or kernel_size % 2 == 0:
            raise ValueError(f"cnn_module_kernel must be odd and >= 3, got {kernel_size}")
        self.causal = causal
        self.lorder = kernel_size - 1 if causal else 0
        self.in_proj = torch.nn.Linear(dim, 2 * dim)
        self.depthwise = torch.nn.Conv1d(dim, dim, kernel_size, groups=dim,
                                         padding=0 if causal else kernel_size // 2)
        self.balancer = Balancer(use_balancers, min_positive=0.05, max_positive=1.0,
                                 min_abs=0.2, max_abs=10.0, prob=balancer_prob)
        self.out_proj = _shrink_init(torch.nn.Linear(dim, dim), 0.1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, cache: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C), valid (B, T, 1) bool, cache (B, kernel-1 or 0, C) ->
        (out (B, T, C), new cache (B, kernel - 1, C); empty when not causal)."""
        # first half times sigmoid(second half), in one operation
        x = torch.nn.functional.glu(self.in_proj(x), dim=-1).masked_fill(~valid, 0.0)
        new_cache = cache
        if self.causal:
            if cache.size(1) == 0:
                cache = torch.zeros(x.size(0), self.lorder, x.size(2), dtype=x.dtype,
                                    device=x.device)
            x = torch.cat([cache.to(x.dtype), x], dim=1)
            new_cache = x[:, x.size(1) - self.lorder:]
        x = self.depthwise(x.transpose(1, 2)).transpose(1, 2)
        return self.out_proj(swoosh_r(self.balancer(x))), new_cache


class BypassModule(torch.nn.Module):
    """orig + (x - orig) * scale, scale learnt per channel (starts at 0.5). In training,
    a gradient that would take the scale outside [scale_min, 1] is reversed;
    ``scale_min`` follows a schedule (the forward uses the scale as it is)."""

    def __init__(self, dim: int, scale_min: ScheduledFloat):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((dim,), 0.5))
        self.scale_min = 0.0
        scheduled(self, "scale_min", scale_min)

    def forward(self, orig: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing() and self.training:
            # the same interpolation in one operation (the exports keep the formula)
            return torch.lerp(orig, x, limit_param_value(self.scale, self.scale_min, 1.0))
        return orig + (x - orig) * self.scale


class ZipformerEncoderLayer(torch.nn.Module):
    """A Zipformer block of ``dim`` channels (see the module docstring for the order).

    Streaming: ``att_cache`` (B, n, cache_width) holds, per earlier frame, the keys,
    non-linear-attention values and the two self-attentions' values; ``conv_cache``
    (B, kernel - 1, 2 * dim) the two causal convolutions' earlier inputs.
    """

    def __init__(self, dim: int, num_heads: int, feedforward_dim: int, query_head_dim: int,
                 pos_head_dim: int, value_head_dim: int, pos_dim: int, cnn_module_kernel: int,
                 causal: bool, dropout_rate: float = 0.1, use_balancers: bool = False,
                 schedule_scale: float = 1.0, sparse_balancers: bool = False):
        super().__init__()
        self.dim = dim

        def sched(*points: Tuple[float, float]) -> ScheduledFloat:
            return ScheduledFloat(*points, scale=schedule_scale)

        # sparse_balancers: balancers act on half of the batches at first, an eighth later;
        # whitening on a quarter of the calls while its metric is above the limit, a
        # fortieth once below (icefall's defaults)
        bal_prob = sched((0.0, 0.5), (8000.0, 0.125)) if sparse_balancers else None
        whiten_probs = (0.025, 0.25) if sparse_balancers else (1.0, 1.0)
        self.attn_weights = RelPositionMultiheadAttentionWeights(
            dim, pos_dim, num_heads, query_head_dim, pos_head_dim, use_whiten=use_balancers,
            whiten_probs=whiten_probs)
        ff_dropout = sched((0.0, 0.3), (20000.0, dropout_rate))
        self.ff1 = FeedForward(dim, feedforward_dim * 3 // 4, ff_dropout, use_balancers, bal_prob)
        self.ff2 = FeedForward(dim, feedforward_dim, ff_dropout, use_balancers, bal_prob)
        self.ff3 = FeedForward(dim, feedforward_dim * 5 // 4, ff_dropout, use_balancers, bal_prob)
        self.nonlin_attn = NonlinAttention(dim, dim * 3 // 4)
        self.self_attn1 = SelfAttention(dim, num_heads, value_head_dim)
        self.self_attn2 = SelfAttention(dim, num_heads, value_head_dim)
        self.conv1 = ConvolutionModule(dim, cnn_module_kernel, causal, use_balancers, bal_prob)
        self.conv2 = ConvolutionModule(dim, cnn_module_kernel, causal, use_balancers, bal_prob)
        self.bypass_mid = BypassModule(dim, sched((0.0, 0.5), (20000.0, 0.2)))
        self.bypass = BypassModule(dim, sched((0.0, 0.9), (20000.0, 0.2)))
        self.norm = BiasNorm(dim)
        self.balancer = Balancer(use_balancers, min_positive=0.45, max_positive=0.55,
                                 min_abs=0.2, max_abs=4.0, prob=bal_prob)
        self.whiten = Whiten(use_balancers, limit=5.0, min_prob=whiten_probs[0],
                             max_prob=whiten_probs[1])
        self.attention_skip_rate = 0.0
        self.conv_skip_rate = 0.0
        self.ff_skip_rate = 0.0
        scheduled(self, "attention_skip_rate", sched((0.0, 0.2), (4000.0, 0.05), (16000.0, 0.0)))
        scheduled(self, "conv_skip_rate", sched((0.0, 0.2), (4000.0, 0.05), (16000.0, 0.0)))
        scheduled(self, "ff_skip_rate", sched((0.0, 0.1), (4000.0, 0.01), (50000.0, 0.0)))
        # widths inside one att_cache frame: keys | non-linear values | values 1 | values 2
        self.key_dim = self.attn_weights.key_dim
        self.nonlin_dim = self.nonlin_attn.hidden_dim
        self.value_dim = self.self_attn1.value_dim
        self.cache_width = self.key_dim + self.nonlin_dim + 2 * self.value_dim
        self.conv_lorder = self.conv1.lorder

    def _keep_masks(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """Training: (7, B, 1, 1) of 0/1, row i keeping or dropping (per utterance) the
        i-th skippable module's output (non-linear attention, self-attention 1,
        convolution 1, feed-forward 2, self-attention 2, convolution 2, feed-forward 3), at
        the current skip rates; drawn in one go. None when nothing can be dropped."""
        if not self.training:
            return None
        att, conv, ff = self.attention_skip_rate, self.conv_skip_rate, self.ff_skip_rate
        if att <= 0.0 and conv <= 0.0 and ff <= 0.0:
            return None
        rates = torch.tensor([att, att, conv, ff, att, conv, ff], device=x.device)
        draw = torch.rand(7, x.size(0), device=x.device)
        return (draw >= rates.unsqueeze(1)).to(x.dtype).view(7, x.size(0), 1, 1)

    @staticmethod
    def _add(x: torch.Tensor, y: torch.Tensor, keep: Optional[torch.Tensor], i: int
             ) -> torch.Tensor:
        """x + y, with y dropped where row i of ``keep`` is 0."""
        if keep is None:
            return x + y
        return torch.addcmul(x, y, keep[i])

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, mask: torch.Tensor,
                valid: torch.Tensor, att_cache: torch.Tensor, conv_cache: torch.Tensor,
                keep_cache: bool = True) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, dim), pos_emb (T + Tk - 1, pos_dim), mask (B|1, T, Tk) bool,
        valid (B, T, 1) bool (False on padding), att_cache (B, Tk - T, cache_width),
        conv_cache (B, kernel - 1 or 0, 2 * dim) ->
        (out (B, T, dim), att_cache (B, Tk, cache_width), conv_cache (B, kernel - 1, 2*dim));
        without ``keep_cache`` (a whole utterance) the given caches come back instead."""
        kd, nd, vd = self.key_dim, self.nonlin_dim, self.value_dim
        orig = x
        weights, keys = self.attn_weights(x, pos_emb, mask, att_cache[..., :kd])
        keep = self._keep_masks(x)
        x = x + self.ff1(x)
        out, nl_values = self.nonlin_attn(x, weights[:, 0], att_cache[..., kd:kd + nd])
        x = self._add(x, out, keep, 0)
        out, values1 = self.self_attn1(x, weights, att_cache[..., kd + nd:kd + nd + vd])
        x = self._add(x, out, keep, 1)
        out, conv_cache1 = self.conv1(x, valid, conv_cache[..., :self.dim])
        x = self._add(x, out, keep, 2)
        x = self._add(x, self.ff2(x), keep, 3)
        x = self.bypass_mid(orig, x)
        out, values2 = self.self_attn2(x, weights, att_cache[..., kd + nd + vd:])
        x = self._add(x, out, keep, 4)
        out, conv_cache2 = self.conv2(x, valid, conv_cache[..., self.dim:])
        x = self._add(x, out, keep, 5)
        x = self._add(x, self.ff3(x), keep, 6)
        x = self.norm(self.balancer(x))
        x = self.whiten(self.bypass(orig, x))
        if not keep_cache:
            return x, att_cache, conv_cache
        new_att_cache = torch.cat([keys, nl_values, values1, values2], dim=-1)
        return x, new_att_cache, torch.cat([conv_cache1, conv_cache2], dim=-1)
