"""ZipformerEncoder: CMVN -> front end (50 Hz) -> Zipformer stacks at their own frame
rates -> the stacks' outputs combined at the widest width -> 2x downsampling (25 Hz).

It is a ``StreamingEncoder`` (``wenet/transformer/streaming_encoder.py``): ``forward(xs,
xs_lens, decoding_chunk_size, num_decoding_left_chunks) -> (out, mask)``,
``output_size()``, its own ``chunk_step`` and cache layout, the base's ``forward_chunk`` /
``forward_chunk_by_chunk``, and an ``embed`` with the runtime's ``subsampling_rate`` (4)
and ``right_context`` (10). One output frame needs only 9 input frames (the front end's
``context``), fewer than ``right_context + 1``: the last output frame of an utterance
reads one 50 Hz frame.

Chunks. ``chunk_size`` and ``left_context_frames`` are counted at 50 Hz, as in
icefall: with ``causal: true`` training draws one of each per batch (-1: whole
utterance / all left context); every positive chunk size must be a multiple of every
stack's downsampling factor and of the output factor (``chunk_multiple``). At decoding,
``decoding_chunk_size`` counts output (25 Hz) frames, so it must be a multiple of
chunk_multiple / 2.

Streaming caches (one utterance). ``att_cache`` (layers, 1, units, width): a unit is
``chunk_multiple`` 50 Hz frames; a layer of a stack of factor ds keeps
chunk_multiple / ds frames per unit side by side (keys, non-linear-attention values,
both self-attentions' values), zero-padded to the widest layer. ``cnn_cache``
(layers, 1, max kernel - 1, 2 * max dim): each layer's two causal convolutions'
last inputs. Cache slots whose position would be before the utterance start (a
fixed-size cache not yet filled, as the ONNX export feeds) are masked from the
offset, so ``att_mask`` is not needed (the exported ONNX encoder has no such input).
Only this package reads these layouts: a WeNet C++ runtime, which allocates
Conformer-shaped caches, cannot drive a Zipformer.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch

from wenet.transformer.cmvn import GlobalCMVN
from wenet.transformer.streaming_encoder import StreamingEncoder
from wenet.utils.mask import make_pad_mask
from wenet.zipformer.frontend import ZipformerFrontEnd, front_end_frames
from wenet.zipformer.scaling import apply_schedules
from wenet.zipformer.stack import (SimpleDownsample, ZipformerStack, convert_num_channels,
                                   frames_at, full_dim_output)
from wenet.zipformer.streaming import CacheLayout, pack_caches, unpack_caches

IntOrList = Union[int, Sequence[int]]


def per_stack(value: IntOrList, num_stacks: int, name: str) -> List[int]:
    """A scalar or a one-element list repeated for every stack; a list of that length kept."""
    values = [int(value)] if isinstance(value, (int, float)) else [int(v) for v in value]
    if len(values) == 1:
        values = values * num_stacks
    if len(values) != num_stacks:
        raise ValueError(f"encoder_conf.{name} has {len(values)} values for "
                         f"{num_stacks} stacks (downsampling_factor)")
    return values


class ZipformerEncoder(StreamingEncoder):
    """The Zipformer encoder (Yao et al., 2024); every icefall dimension is an option."""

    def __init__(self, input_size: int, output_downsampling_factor: int = 2,
                 downsampling_factor: Sequence[int] = (1, 2, 4, 8, 4, 2),
                 num_encoder_layers: IntOrList = (2, 2, 3, 4, 3, 2),
                 encoder_dim: IntOrList = (192, 256, 384, 512, 384, 256),
                 encoder_unmasked_dim: IntOrList = (192, 192, 256, 256, 256, 192),
                 feedforward_dim: IntOrList = (512, 768, 1024, 1536, 1024, 768),
                 num_heads: IntOrList = (4, 4, 4, 8, 4, 4), query_head_dim: IntOrList = 32,
                 value_head_dim: IntOrList = 12, pos_head_dim: IntOrList = 4, pos_dim: int = 48,
                 cnn_module_kernel: IntOrList = (31, 31, 15, 15, 15, 31), causal: bool = False,
                 chunk_size: Sequence[int] = (16, 32, 64, -1),
                 left_context_frames: Sequence[int] = (64, 128, 256, -1),
                 dropout_rate: float = 0.1, use_balancers: bool = False,
                 sparse_balancers: bool = False,
                 schedule_scale: float = 1.0, frontend_channels: Sequence[int] = (8, 32, 128),
                 frontend_activation: str = "swoosh_r", global_cmvn: Optional[GlobalCMVN] = None):
        super().__init__()
        factors = [int(d) for d in downsampling_factor]
        n = len(factors)
        if n == 0 or any(d < 1 for d in factors) or output_downsampling_factor < 1:
            raise ValueError(f"downsampling factors must be >= 1: {factors}, "
                             f"output {output_downsampling_factor}")
        dims = per_stack(encoder_dim, n, "encoder_dim")
        unmasked = per_stack(encoder_unmasked_dim, n, "encoder_unmasked_dim")
        if any(u > d for u, d in zip(unmasked, dims)):
            raise ValueError(f"encoder_unmasked_dim {unmasked} exceeds encoder_dim {dims}")
        self.global_cmvn = global_cmvn
        self.embed = ZipformerFrontEnd(input_size, dims[0], frontend_channels, dropout_rate,
                                       output_downsampling_factor, frontend_activation)
        layers, ffs, heads, kernels = (
            per_stack(v, n, k) for v, k in ((num_encoder_layers, "num_encoder_layers"),
                                            (feedforward_dim, "feedforward_dim"),
                                            (num_heads, "num_heads"),
                                            (cnn_module_kernel, "cnn_module_kernel")))
        qdims, vdims, pdims = (per_stack(v, n, k) for v, k in (
            (query_head_dim, "query_head_dim"), (value_head_dim, "value_head_dim"),
            (pos_head_dim, "pos_head_dim")))
        self.stacks = torch.nn.ModuleList([
            ZipformerStack(factors[i], layers[i], dims[i], unmasked[i], pos_dim, dict(
                num_heads=heads[i], feedforward_dim=ffs[i], query_head_dim=qdims[i],
                pos_head_dim=pdims[i], value_head_dim=vdims[i],
                cnn_module_kernel=kernels[i], causal=causal, dropout_rate=dropout_rate,
                use_balancers=use_balancers, sparse_balancers=sparse_balancers),
                schedule_scale)
            for i in range(n)])
        self.output_downsample = SimpleDownsample(output_downsampling_factor)
        self.output_factor = output_downsampling_factor
        self._output_size = max(dims)
        self.causal = causal
        self.chunk_multiple = math.lcm(*factors, output_downsampling_factor)
        self.chunk_size = [int(c) for c in chunk_size]
        self.left_context_frames = [int(c) for c in left_context_frames]
        self._check_chunk_options()
        # the streaming cache layout (CacheLayout), as plain lists for TorchScript
        self._cache_layers = [len(s.layers) for s in self.stacks]
        self._cache_factors = [s.factor for s in self.stacks]
        self._cache_widths = [s.cache_width for s in self.stacks]
        self._cache_dims = [s.dim for s in self.stacks]
        self._cache_lorders = [s.conv_lorder for s in self.stacks]

    def _check_chunk_options(self) -> None:
        bad = [c for c in self.chunk_size if c == 0 or (c > 0 and c % self.chunk_multiple)]
        if not self.chunk_size or bad:
            raise ValueError(f"encoder_conf.chunk_size {self.chunk_size}: each must be -1 or a "
                             f"positive multiple of {self.chunk_multiple} (50 Hz frames)")
        if not self.left_context_frames or 0 in self.left_context_frames:
            raise ValueError(f"encoder_conf.left_context_frames {self.left_context_frames}: "
                             "each must be -1 or > 0 (50 Hz frames)")

    def cache_layout(self) -> CacheLayout:
        """How the per-stack streaming caches are packed (``wenet.zipformer.streaming``)."""
        return CacheLayout(self._cache_layers, self._cache_factors, self._cache_widths,
                           self._cache_dims, self._cache_lorders, self.chunk_multiple)

    @torch.jit.unused
    def streaming_cache_shapes(self, required_cache_size: int
                               ) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """Shapes of the packed (att_cache, cnn_cache) that keep ``required_cache_size``
        output frames of left context (> 0): what a fixed-size-cache runtime allocates."""
        layout = self.cache_layout()
        if required_cache_size <= 0 or (
                required_cache_size * self.output_factor) % layout.unit != 0:
            raise ValueError(f"required_cache_size must be a positive multiple of "
                             f"{layout.unit // self.output_factor}, got {required_cache_size}")
        units = required_cache_size * self.output_factor // layout.unit
        width = max(layout.unit // f * w for f, w in zip(layout.factors, layout.widths))
        num_layers = sum(layout.layers)
        return ((num_layers, 1, units, width),
                (num_layers, 1, max(layout.lorders), 2 * max(layout.dims)))

    @torch.jit.unused
    def causal_conv_frames(self) -> int:
        return max(self._cache_lorders)

    def is_streaming(self) -> bool:
        """Causal Zipformers are trained on drawn chunks (``chunk_size``)."""
        return self.causal

    def output_size(self) -> int:
        """Dimension of the encoder output (the widest stack's)."""
        return self._output_size

    def min_input_frames(self) -> int:
        return self.embed.context

    @torch.jit.unused
    def check_streaming_chunk(self, decoding_chunk_size: int) -> None:
        if not self.causal:
            raise ValueError("chunk-by-chunk decoding needs a Zipformer with causal: true")
        super().check_streaming_chunk(decoding_chunk_size)
        self.check_decoding_chunk(decoding_chunk_size)

    @torch.jit.unused
    def set_batch_count(self, batch_count: int) -> None:
        """Move every dropout / skip / bypass schedule to ``batch_count`` (the training
        loop calls this before each batch)."""
        apply_schedules(self, float(batch_count))

    def _chunk_choice(self, decoding_chunk_size: int, num_decoding_left_chunks: int
                      ) -> Tuple[int, int]:
        """(chunk size at 50 Hz or -1, left chunks or -1) for a full forward."""
        if not self.causal or decoding_chunk_size < 0:
            return -1, -1
        if decoding_chunk_size > 0:
            self.check_decoding_chunk(decoding_chunk_size)
            return 2 * decoding_chunk_size, num_decoding_left_chunks
        # host-side draws from the CPU generator, whatever the model's device: no device sync
        draw = int(torch.randint(0, len(self.chunk_size), (1,), device="cpu").item())
        chunk = self.chunk_size[draw]
        if chunk < 0:
            return -1, -1
        draw = int(torch.randint(0, len(self.left_context_frames), (1,), device="cpu").item())
        left = self.left_context_frames[draw]
        return chunk, (-1 if left < 0 else left // chunk)

    def check_decoding_chunk(self, decoding_chunk_size: int) -> None:
        """A decoding chunk (output frames) must cover whole groups of every stack."""
        if (2 * decoding_chunk_size) % self.chunk_multiple != 0:
            raise ValueError("decoding_chunk_size " + str(decoding_chunk_size) + " of the "
                             "Zipformer must be a multiple of "
                             + str(self.chunk_multiple // 2) + " output frames")

    def _empty_caches(self, x: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        att: List[torch.Tensor] = []
        conv: List[torch.Tensor] = []
        for stack in self.stacks:
            num_layers = len(stack.layers)
            att.append(x.new_zeros(num_layers, x.size(0), 0, stack.cache_width))
            conv.append(x.new_zeros(num_layers, x.size(0), 0, 2 * stack.dim))
        return att, conv

    def _encode(self, x: torch.Tensor, lengths: torch.Tensor, offset: torch.Tensor,
                chunk: int, left_chunks: int, att: List[torch.Tensor],
                conv: List[torch.Tensor], keep_cache: bool
                ) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]:
        """The stacks on 50 Hz frames x (B, T, C0), then the output downsampling."""
        outputs: List[torch.Tensor] = []
        new_att: List[torch.Tensor] = []
        new_conv: List[torch.Tensor] = []
        for i, stack in enumerate(self.stacks):
            x = convert_num_channels(x, stack.dim)
            x, a, c = stack(x, lengths, offset, chunk, left_chunks, att[i], conv[i],
                            keep_cache)
            outputs.append(x)
            new_att.append(a)
            new_conv.append(c)
        x = self.output_downsample(full_dim_output(outputs), lengths)
        return x, new_att, new_conv

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor, decoding_chunk_size: int = 0,
                num_decoding_left_chunks: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
        """xs (B, T, D_in), xs_lens (B,) -> (out (B, T', D), mask (B, 1, T')), T' =
        ceil(((T - 7) // 2) / 2). ``decoding_chunk_size``: 0 = the training choice
        (a random chunk per batch when causal), < 0 full context, > 0 that chunk size
        in output frames with ``num_decoding_left_chunks`` (causal models only)."""
        self.check_input_frames(xs.size(1))
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        x = self.embed(xs)
        lengths = front_end_frames(xs_lens).clamp(max=x.size(1))
        chunk, left = self._chunk_choice(decoding_chunk_size, num_decoding_left_chunks)
        att, conv = self._empty_caches(x)
        offset = torch.zeros(1, dtype=torch.long, device=x.device)
        x, _, _ = self._encode(x, lengths, offset, chunk, left, att, conv, False)
        out_lens = frames_at(lengths, self.output_factor)
        return x, ~make_pad_mask(out_lens, x.size(1)).unsqueeze(1)

    def chunk_step(self, xs: torch.Tensor, offset: torch.Tensor, required_cache_size: int,
                   att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                   att_mask: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool)
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The streaming step (``StreamingEncoder.chunk_step``), caches packed as the
        module docstring says. ``att_mask`` is accepted for the export's signature and
        not needed: unfilled cache slots are masked from the offset."""
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        x = self.embed(xs)
        lengths = torch.full((1,), x.size(1), dtype=torch.long, device=x.device)
        att, conv = unpack_caches(self.cache_layout(), att_cache, cnn_cache, x)
        x, new_att, new_conv = self._encode(x, lengths, offset * self.output_factor, -1, -1,
                                            att, conv, True)
        keep = -1 if required_cache_size < 0 else required_cache_size * self.output_factor
        r_att, r_cnn = pack_caches(self.cache_layout(), new_att, new_conv, keep)
        return x, r_att, r_cnn
