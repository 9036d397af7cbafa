"""``encoder_chunk.onnx``: the streaming encoder step with fixed-size caches, in WeNet
2.x's ONNX signature (``chunk, offset, att_cache, cnn_cache, att_mask -> output,
r_att_cache, r_cnn_cache``), written only for a streaming model.

The graph is the encoder's own streaming step (``StreamingEncoder.chunk_step``, which
``forward_chunk`` and so the TorchScript runtime use too), traced with a tensor
offset; the chunk window, the cache size and the cache shapes are the encoder's
(``chunk_window``, ``streaming_cache_shapes``). ONNX graphs want fixed ranks and,
ideally, fixed cache sizes, so the encoder takes caches that are always
``required_cache_size = chunk_size * left_chunks`` frames long. Before the cache has
filled, its first ``required_cache_size - offset`` slots hold zeros; ``att_mask``
(False there) keeps every query from attending to them, and their positional
encodings read position 0 (any value would do: those keys are masked). A real key
``j`` of the concatenated (cache + chunk) keys sits at absolute output position
``offset - required_cache_size + j``, the same position ``forward_chunk`` gives it, so
the output equals the eager chunk-by-chunk output whose cache grows up to the same
size. The causal convolution cache starts as zeros, which is exactly the eager left
padding. ``offset`` is an int64 tensor of shape (1,); positions past the positional
table (5000 output frames, 200 s at 4x subsampling) are an error, as in eager mode.
The Zipformer masks unfilled slots from the offset, so its graph has no ``att_mask``
input (onnx drops the unused input).

A model that was not trained for chunks (``encoder.is_streaming()`` false: a U2 model
without ``use_dynamic_chunk`` / ``static_chunk_size``, a non-causal Zipformer) gets no
chunk file: its chunked output would differ from what it was trained on.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

import torch

from wenet.export.onnx_common import encoder_metadata, export_graph, metadata_value


def chunk_attention_mask(offset: int, required_cache_size: int,
                         chunk_frames: int) -> torch.Tensor:
    """bool (1, 1, required_cache_size + chunk_frames): False on cache slots not yet
    filled after ``offset`` output frames, True elsewhere."""
    mask = torch.ones(1, 1, required_cache_size + chunk_frames, dtype=torch.bool)
    empty = max(required_cache_size - offset, 0)
    mask[:, :, :empty] = False
    return mask


class StreamingEncoderONNX(torch.nn.Module):
    """The encoder's ``chunk_step`` with WeNet's ONNX signature and fixed-size caches.

    forward(chunk (1, T_in, D_in), offset int64 (1,), att_cache (L, H, R, 2*d_k),
    cnn_cache (L, 1, D, k-1), att_mask bool (1, 1, R + T')) ->
    (output (1, T', D), r_att_cache (same shape), r_cnn_cache (same shape)).
    An encoder without a causal convolution carries no convolution cache: its
    cnn_cache has 0 frames and comes back unchanged.
    """

    def __init__(self, encoder: torch.nn.Module, required_cache_size: int):
        super().__init__()
        if required_cache_size <= 0:
            raise ValueError(f"required_cache_size must be > 0, got {required_cache_size}")
        self.encoder = encoder
        self.required_cache_size = required_cache_size
        self.carries_cnn_cache = encoder.causal_conv_frames() > 0

    def forward(self, chunk: torch.Tensor, offset: torch.Tensor, att_cache: torch.Tensor,
                cnn_cache: torch.Tensor, att_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        output, r_att_cache, r_cnn_cache = self.encoder.chunk_step(
            chunk, offset, self.required_cache_size, att_cache, cnn_cache, att_mask)
        if not self.carries_cnn_cache:
            r_cnn_cache = cnn_cache
        return output, r_att_cache, r_cnn_cache


def streaming_metadata(model: torch.nn.Module, configs: Mapping[str, Any], chunk_size: int,
                       left_chunks: int) -> Dict[str, str]:
    """``encoder_metadata`` plus WeNet's streaming keys.

    ``cnn_module_kernel`` is the kernel of the causal convolution whose cache the
    graph carries (cnn_cache has kernel - 1 frames), 0 when there is none (a
    non-causal or conv-free encoder: cnn_cache then has 0 frames).
    """
    encoder = model.encoder
    conv_order = encoder.causal_conv_frames()
    chunks = encoder.chunk_window(chunk_size, left_chunks)
    att_shape, _ = encoder.streaming_cache_shapes(chunks.required_cache_size)
    meta = encoder_metadata(model, configs)
    meta.update({k: metadata_value(v) for k, v in {
        "chunk_size": chunk_size,
        "left_chunks": left_chunks,
        "required_cache_size": chunks.required_cache_size,
        "decoding_window": chunks.window,
        "num_blocks": att_shape[0],  # the att_cache's dims 0 and 1: layers and heads
        "head": att_shape[1],        # (the Zipformer packs its caches: 1 "head")
        "cnn_module_kernel": conv_order + 1 if conv_order > 0 else 0,
    }.items()})
    return meta


def export_encoder_chunk(model: torch.nn.Module, configs: Mapping[str, Any], path: str,
                         chunk_size: int, left_chunks: int) -> None:
    """Write ``encoder_chunk.onnx`` for ``chunk_size`` output frames per chunk and
    ``left_chunks`` chunks of attention cache (both > 0: the caches have fixed sizes)."""
    if chunk_size <= 0 or left_chunks <= 0:
        raise ValueError("ONNX streaming export needs chunk_size > 0 and left_chunks > 0 "
                         f"(fixed-size caches), got {chunk_size}, {left_chunks}")
    encoder = model.encoder
    if not encoder.is_streaming():
        raise ValueError("encoder_chunk.onnx needs a streaming encoder (trained on chunks)")
    encoder.check_streaming_chunk(chunk_size)
    chunks = encoder.chunk_window(chunk_size, left_chunks)
    required = chunks.required_cache_size
    att_shape, cnn_shape = encoder.streaming_cache_shapes(required)
    chunk = torch.randn(1, chunks.window, int(configs["input_dim"]))
    offset = torch.tensor([required], dtype=torch.int64)  # a full cache while tracing
    args = (chunk, offset, torch.zeros(att_shape), torch.zeros(cnn_shape),
            chunk_attention_mask(required, required, chunk_size))
    export_graph(StreamingEncoderONNX(encoder, required), args, path,
                 ["chunk", "offset", "att_cache", "cnn_cache", "att_mask"],
                 ["output", "r_att_cache", "r_cnn_cache"],
                 {"chunk": {1: "T"}, "att_mask": {2: "T_ADD_T_CACHE"}, "output": {1: "T_OUT"}},
                 streaming_metadata(model, configs, chunk_size, left_chunks))
