"""The graphs of the sherpa-onnx export (wenet/export/sherpa.py): wrappers that give the
model the inputs, outputs and cache shapes of sherpa-onnx's loaders, and the packing of
our streaming caches into the shapes those loaders allocate from the metadata."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from wenet.dataset.fbank import SILENCE_LOG_MEL
from wenet.export.onnx_streaming import StreamingEncoderONNX

INT16_LOG_GAIN = 30.0 * math.log(2.0)  # log mel energy of samples scaled by 2**15


def int16_range_fbank(x: torch.Tensor) -> torch.Tensor:
    """Log mel energies of samples in [-1, 1] (sherpa-onnx's ``normalize_samples``) -> those
    of the same samples in the int16 range, which the model was trained on: + 30 ln 2
    (every step before the log is linear, and 2**15 scales floats exactly).

    sherpa-onnx floors energies at float32 eps on the [-1, 1] scale, 2**30 * eps = 128 on
    the int16 scale, so a quiet bin whose int16-range log energy lies between our floor
    (ln eps) and ln 128 arrives at the floor, its value lost. Such a bin is put at ln 128,
    the top of that range (the values lost are just below it: on the main job's test set
    this gives the same text as our runtime on all 230 utterances, the floor gave 4
    differences); a frame whose every bin is at the floor is digital silence and stays at
    our floor, as our own fbank has it."""
    floored = x <= SILENCE_LOG_MEL + 1e-4
    silent_frame = x.amax(dim=-1, keepdim=True) <= SILENCE_LOG_MEL + 1e-4
    quiet = torch.where(silent_frame, torch.full_like(x, SILENCE_LOG_MEL),
                        torch.full_like(x, SILENCE_LOG_MEL + INT16_LOG_GAIN))
    return torch.where(floored, quiet, x + INT16_LOG_GAIN)


@dataclass(frozen=True)
class CachePacking:
    """A cache of shape ``ours`` carried in a tensor of shape ``theirs`` (what the loader
    allocates): our elements first, in order, zeros after them."""

    ours: Tuple[int, ...]
    theirs: Tuple[int, ...]

    def __post_init__(self) -> None:
        if math.prod(self.theirs) < math.prod(self.ours):
            raise ValueError(f"a {self.theirs} tensor cannot carry a {self.ours} cache")

    @property
    def empty(self) -> bool:
        """No cache (an encoder without a causal convolution): the loader's tensor is
        passed back unchanged (it stays an input of the graph)."""
        return math.prod(self.ours) == 0

    def unpack(self, t: torch.Tensor) -> torch.Tensor:
        if self.ours == self.theirs:
            return t
        if self.empty:  # onnx Reshape reads a 0 in a shape as "keep this dim"
            return t.new_zeros(self.ours)
        return t.reshape(-1)[:math.prod(self.ours)].reshape(self.ours)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        if self.ours == self.theirs:
            return t
        pad = math.prod(self.theirs) - math.prod(self.ours)
        flat = t.reshape(-1)
        if pad:
            flat = torch.cat([flat, flat.new_zeros(pad)])
        return flat.reshape(self.theirs)


def _uses(out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """``out`` plus zero times ``inputs``: keeps inputs a loader passes by position in the
    graph when the encoder does not need them (onnx drops unused inputs)."""
    for x in inputs:
        out = out + 0.0 * x.reshape(-1)[:1].to(out.dtype).sum()
    return out


class FullContextSherpa(torch.nn.Module):
    """x (N, T, F) fbank of samples in [-1, 1], x_lens (N,) -> the full-context encoder's
    output through the CTC head (``ctc``: log_probs (N, T', V)) or the joint's encoder
    projection (encoder_out (N, T', J)), and its lengths (N,)."""

    def __init__(self, model: torch.nn.Module, ctc: bool):
        super().__init__()
        self.model = model
        self.head = model.ctc_activation if ctc else model.project_encoder

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        out, mask = self.model.encoder(int16_range_fbank(x), x_lens, -1, -1)
        return self.head(out), mask.squeeze(1).sum(1).to(torch.int64)


class OnlineCtcSherpa(torch.nn.Module):
    """sherpa-onnx's online WeNet CTC step: ``offset`` counts the cache slots too (it
    starts at ``required_cache_size``), caches in the loader's shapes."""

    def __init__(self, model: torch.nn.Module, required: int, att: CachePacking,
                 cnn: CachePacking):
        super().__init__()
        self.model = model
        self.step = StreamingEncoderONNX(model.encoder, required)
        self.att, self.cnn = att, cnn

    def forward(self, x: torch.Tensor, offset: torch.Tensor, required_cache_size: torch.Tensor,
                attn_cache: torch.Tensor, conv_cache: torch.Tensor, attn_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, att, cnn = self.step(x, offset - required_cache_size, self.att.unpack(attn_cache),
                                  self.cnn.unpack(conv_cache), attn_mask)
        log_probs = _uses(self.model.ctc_activation(out), attn_mask)
        return log_probs, self.att.pack(att), conv_cache if self.cnn.empty else self.cnn.pack(cnn)


class StreamingTransducerEncoderSherpa(torch.nn.Module):
    """sherpa-onnx's online conformer transducer encoder step: x (1, T, F) fbank of samples
    in [-1, 1], the two caches (batch on dim 2), processed_frames (1,) input frames before
    this chunk -> (encoder_out (1, chunk_size, J) projected, the next caches)."""

    def __init__(self, model: torch.nn.Module, chunk_size: int, required: int,
                 att: CachePacking, cnn: CachePacking):
        super().__init__()
        self.model = model
        self.step = StreamingEncoderONNX(model.encoder, required)
        self.chunk_size, self.required = chunk_size, required
        self.rate = int(model.subsampling_rate())
        self.att, self.cnn = att, cnn

    def forward(self, x: torch.Tensor, cached_att: torch.Tensor, cached_conv: torch.Tensor,
                processed_frames: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        offset = torch.div(processed_frames, self.rate, rounding_mode="floor")
        slots = torch.arange(self.required + self.chunk_size, device=x.device)
        mask = (slots >= self.required - offset).view(1, 1, -1)
        out, att, cnn = self.step(int16_range_fbank(x), offset, self.att.unpack(cached_att),
                                  self.cnn.unpack(cached_conv), mask)
        cnn = cached_conv if self.cnn.empty else self.cnn.pack(cnn)
        return self.model.project_encoder(out), self.att.pack(att), cnn


class DecoderSherpa(torch.nn.Module):
    """y (N, context_size) previous tokens, -1 for none -> decoder_out (N, J): the
    stateless predictor's step on them, through the joint's predictor projection."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.blank = int(model.blank_symbol())

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        y = torch.where(y < 0, torch.full_like(y, self.blank), y)
        out, _ = self.model.forward_predictor_step(y[:, -1], [y[:, :-1]])
        return out


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def wenet_ctc_caches(att_shape: Tuple[int, ...], cnn_shape: Tuple[int, ...], required: int
                     ) -> Tuple[Dict[str, int], CachePacking, CachePacking]:
    """The WeNet CTC loader's metadata (num_blocks, head, output_size, cnn_module_kernel)
    and packings: it allocates attn_cache (num_blocks, head, required, output_size / head
    * 2) and conv_cache (num_blocks, 1, output_size, cnn_module_kernel - 1). A U2 encoder's
    attention cache is that shape already; other caches are carried flat (head 1)."""
    blocks, heads, frames, width = att_shape
    if frames == required and width % 2 == 0:
        meta = {"num_blocks": blocks, "head": heads, "output_size": heads * width // 2}
    else:
        meta = {"num_blocks": 1, "head": 1,
                "output_size": _ceil(math.prod(att_shape), 2 * required)}
    theirs_att = (meta["num_blocks"], meta["head"], required,
                  meta["output_size"] // meta["head"] * 2)
    kernel = 1 + max(1, _ceil(math.prod(cnn_shape), meta["num_blocks"] * meta["output_size"]))
    if (len(cnn_shape) == 4 and cnn_shape[:3] == (blocks, 1, meta["output_size"])
            and cnn_shape[3] > 0 and theirs_att == tuple(att_shape)):
        kernel = cnn_shape[3] + 1
    meta["cnn_module_kernel"] = kernel
    theirs_cnn = (meta["num_blocks"], 1, meta["output_size"], kernel - 1)
    return meta, CachePacking(tuple(att_shape), theirs_att), CachePacking(tuple(cnn_shape),
                                                                          theirs_cnn)


def conformer_transducer_caches(att_shape: Tuple[int, ...], cnn_shape: Tuple[int, ...],
                                dim: int) -> Tuple[Dict[str, int], CachePacking, CachePacking]:
    """The online conformer transducer loader's metadata and packings: it allocates
    (num_encoder_layers, left_context, N, encoder_dim) and (num_encoder_layers,
    cnn_module_kernel - 1, N, encoder_dim); both caches are carried flat in one layer."""
    left = _ceil(math.prod(att_shape), dim)
    kernel = 1 + max(1, _ceil(math.prod(cnn_shape), dim))
    meta = {"num_encoder_layers": 1, "left_context": left, "encoder_dim": dim,
            "cnn_module_kernel": kernel, "pad_length": 0}
    return (meta, CachePacking(tuple(att_shape), (1, left, 1, dim)),
            CachePacking(tuple(cnn_shape), (1, kernel - 1, 1, dim)))
