"""Packing the Zipformer's per-stack streaming caches into the two tensors
(``att_cache``, ``cnn_cache``) that ``forward_chunk`` and the runtimes pass around.

The layouts are described in ``wenet/zipformer/encoder.py``. ``CacheLayout`` lists, per
stack: layers, downsampling factor, attention-cache width per frame, channels, and
causal-convolution context (kernel - 1, 0 when not causal); ``unit`` is the number of
50 Hz frames per packed cache frame (every factor divides it).
"""
from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch


class CacheLayout(NamedTuple):
    layers: List[int]
    factors: List[int]
    widths: List[int]
    dims: List[int]
    lorders: List[int]
    unit: int


def unpack_caches(layout: CacheLayout, att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                  x: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """Packed caches (empty on the first chunk) -> per stack (layers, 1, n, width) and
    (layers, 1, kernel - 1 or 0, 2 * dim); ``x`` gives dtype and device."""
    att: List[torch.Tensor] = []
    conv: List[torch.Tensor] = []
    start = 0
    for i in range(len(layout.layers)):
        n, width, dim = layout.layers[i], layout.widths[i], layout.dims[i]
        per_unit = layout.unit // layout.factors[i]
        if att_cache.size(0) == 0:
            att.append(x.new_zeros(n, 1, 0, width))
        else:
            a = att_cache[start:start + n, :, :, :per_unit * width]
            att.append(a.reshape(n, 1, att_cache.size(2) * per_unit, width).to(x.dtype))
        if cnn_cache.size(0) == 0:
            conv.append(x.new_zeros(n, 1, 0, 2 * dim))
        else:
            frames = cnn_cache.size(2)
            c = cnn_cache[start:start + n, :, frames - layout.lorders[i]:, :2 * dim]
            conv.append(c.to(x.dtype))
        start += n
    return att, conv


def _pad_last(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.size(-1) == width:
        return x
    pad = x.new_zeros(x.shape[:-1] + (width - x.size(-1),))
    return torch.cat([x, pad], dim=-1)


def pack_caches(layout: CacheLayout, att: List[torch.Tensor], conv: List[torch.Tensor],
                keep_frames: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-stack new caches -> packed ones, keeping the last ``keep_frames`` 50 Hz frames
    of attention context (< 0: all). A last chunk shorter than a unit is completed
    with zero frames (its caches are not meant for a next chunk)."""
    packed_width = max([layout.unit // f * w for f, w in zip(layout.factors, layout.widths)])
    max_lorder = max(layout.lorders)
    conv_width = 2 * max(layout.dims)
    att_out: List[torch.Tensor] = []
    conv_out: List[torch.Tensor] = []
    for i in range(len(layout.layers)):
        a = att[i]
        n, width = a.size(0), a.size(3)
        per_unit = layout.unit // layout.factors[i]
        if keep_frames == 0:
            a = a[:, :, :0]
        elif keep_frames > 0:
            a = a[:, :, -(keep_frames // layout.factors[i]):]
        rest = a.size(2) % per_unit
        if rest != 0:
            a = torch.cat([a, a.new_zeros(n, 1, per_unit - rest, width)], dim=2)
        a = a.reshape(n, 1, a.size(2) // per_unit, per_unit * width)
        att_out.append(_pad_last(a, packed_width))
        c = conv[i]
        if c.size(2) < max_lorder:
            c = torch.cat([c.new_zeros(n, 1, max_lorder - c.size(2), c.size(3)), c], dim=2)
        conv_out.append(_pad_last(c, conv_width))
    return torch.cat(att_out, dim=0), torch.cat(conv_out, dim=0)
