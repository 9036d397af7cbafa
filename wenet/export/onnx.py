"""ONNX export of a trained model for CPU runtimes: a streaming encoder with
fixed-size caches, the CTC head, and the rescoring decoder (WeNet's CPU layout:
``encoder.onnx``, ``ctc.onnx``, ``decoder.onnx``).

Streaming design. The graph is the encoder's own streaming step
(``StreamingEncoder.chunk_step``, which ``forward_chunk`` and so the TorchScript
runtime use too), traced with a tensor offset; the chunk window, the cache size
and the cache shapes are the encoder's (``chunk_window``, ``streaming_cache_shapes``). ONNX graphs want fixed ranks
and, ideally, fixed cache sizes, so the encoder takes caches that are always
``required_cache_size = chunk_size * left_chunks`` frames long. Before the
cache has filled, its first ``required_cache_size - offset`` slots hold zeros;
``att_mask`` (False there) keeps every query from attending to them, and their
positional encodings read position 0 (any value would do: those keys are
masked). A real key ``j`` of the concatenated (cache + chunk) keys sits at
absolute output position ``offset - required_cache_size + j``, the same
position ``forward_chunk`` gives it, so the output equals the eager
chunk-by-chunk output whose cache grows up to the same size. The causal
convolution cache starts as zeros, which is exactly the eager left padding.
``offset`` is an int64 tensor of shape (1,); positions past the positional
table (5000 output frames, 200 s at 4x subsampling) are an error, as in eager
mode.

Input and output names follow WeNet 2.x's ONNX CPU export, so its runtime can
feed them by name: encoder ``chunk, offset, att_cache, cnn_cache, att_mask ->
output, r_att_cache, r_cnn_cache``; CTC ``hidden -> probs``; decoder ``hyps,
hyps_lens, encoder_out -> score, r_score``.
"""
from __future__ import annotations

import io
import logging
import os
import warnings
from typing import Dict, Sequence, Tuple

import torch

from wenet.utils.file_utils import atomic_open

OPSET = 17


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


class CTCHeadONNX(torch.nn.Module):
    """hidden (1, T, D) -> CTC log-probabilities (1, T, V)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.ctc_activation(hidden)


class RescoringDecoderONNX(torch.nn.Module):
    """forward_attention_decoder with the model's reverse_weight fixed at export."""

    def __init__(self, model: torch.nn.Module, reverse_weight: float):
        super().__init__()
        self.model = model
        self.reverse_weight = reverse_weight

    def forward(self, hyps: torch.Tensor, hyps_lens: torch.Tensor,
                encoder_out: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.model.forward_attention_decoder(hyps, hyps_lens, encoder_out,
                                                    self.reverse_weight)


def encoder_metadata(model: torch.nn.Module, chunk_size: int,
                     left_chunks: int) -> Dict[str, str]:
    """What a runtime needs to drive encoder.onnx (WeNet's metadata keys, plus a few).

    ``cnn_module_kernel`` is the kernel of the causal convolution whose cache the
    graph carries (cnn_cache has kernel - 1 frames), 0 when there is none (a
    non-causal or conv-free encoder: cnn_cache then has 0 frames).
    """
    encoder = model.encoder
    conv_order = encoder.causal_conv_frames()
    chunks = encoder.chunk_window(chunk_size, left_chunks)
    att_shape, _ = encoder.streaming_cache_shapes(chunks.required_cache_size)
    meta = {
        "output_size": encoder.output_size(),
        "num_blocks": att_shape[0],  # the att_cache's dims 0 and 1: layers and heads
        "head": att_shape[1],        # (the Zipformer packs its caches: 1 "head")
        "cnn_module_kernel": conv_order + 1 if conv_order > 0 else 0,
        "subsampling_rate": chunks.subsampling_rate,
        "right_context": chunks.right_context,
        "sos_symbol": int(model.sos_symbol()),
        "eos_symbol": int(model.eos_symbol()),
        "is_bidirectional_decoder": int(model.is_bidirectional_decoder()),
        "reverse_weight": float(model.reverse_weight),
        "chunk_size": chunk_size,
        "left_chunks": left_chunks,
        "required_cache_size": chunks.required_cache_size,
        "decoding_window": chunks.window,
        "vocab_size": int(model.vocab_size),
    }
    return {k: str(v) for k, v in meta.items()}


def _export(module: torch.nn.Module, args: tuple, path: str, input_names: Sequence[str],
            output_names: Sequence[str], dynamic_axes: Dict[str, Dict[int, str]],
            metadata: Dict[str, str] | None = None) -> None:
    """torch.onnx.export into memory, ``metadata`` into metadata_props, checked, then
    written with atomic_open (no half-written model on failure).

    The TorchScript-based exporter (dynamo=False) is used: the graphs are
    small, its dynamic_axes cover the varying lengths, and it needs no guards
    on the data-dependent offset.
    """
    import onnx  # local: only export needs it

    buffer = io.BytesIO()
    # TracerWarnings flag Python branches on shapes; here they depend only on
    # the model and the fixed cache size, never on the chunk length or offset
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=OPSET,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, do_constant_folding=True)
    proto = onnx.load_from_string(buffer.getvalue())
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key = key
        entry.value = value
    onnx.checker.check_model(proto)
    with atomic_open(path, "wb") as f:
        f.write(proto.SerializeToString())


def export_onnx_models(model: torch.nn.Module, output_dir: str, feat_dim: int,
                       chunk_size: int = 16, left_chunks: int = 4) -> Dict[str, str]:
    """Write encoder.onnx (streaming, with metadata), ctc.onnx and decoder.onnx.

    ``feat_dim``: input feature size (train.yaml's input_dim). Returns
    {"encoder"|"ctc"|"decoder": path}.
    """
    if chunk_size <= 0 or left_chunks <= 0:
        raise ValueError("ONNX streaming export needs chunk_size > 0 and "
                         f"left_chunks > 0 (fixed-size caches), got {chunk_size}, {left_chunks}")
    encoder = model.encoder
    if not encoder.is_streaming():
        logging.warning("the model was not trained for chunks (no use_dynamic_chunk or "
                        "static_chunk_size): streaming output will differ from full context")
    model = model.eval()
    os.makedirs(output_dir, exist_ok=True)
    paths = {name: os.path.join(output_dir, f"{name}.onnx")
             for name in ("encoder", "ctc", "decoder")}
    chunks = encoder.chunk_window(chunk_size, left_chunks)
    required = chunks.required_cache_size
    att_shape, cnn_shape = encoder.streaming_cache_shapes(required)

    chunk = torch.randn(1, chunks.window, feat_dim)
    offset = torch.tensor([required], dtype=torch.int64)  # a full cache while tracing
    args = (chunk, offset, torch.zeros(att_shape), torch.zeros(cnn_shape),
            chunk_attention_mask(required, required, chunk_size))
    _export(StreamingEncoderONNX(encoder, required).eval(), args, paths["encoder"],
            ["chunk", "offset", "att_cache", "cnn_cache", "att_mask"],
            ["output", "r_att_cache", "r_cnn_cache"],
            {"chunk": {1: "T"}, "att_mask": {2: "T_ADD_T_CACHE"}, "output": {1: "T_OUT"}},
            encoder_metadata(model, chunk_size, left_chunks))
    logging.info("exported %s", paths["encoder"])

    hidden = torch.randn(1, chunk_size, encoder.output_size())
    _export(CTCHeadONNX(model).eval(), (hidden,), paths["ctc"], ["hidden"], ["probs"],
            {"hidden": {1: "T"}, "probs": {1: "T"}})
    logging.info("exported %s", paths["ctc"])

    sos = int(model.sos_symbol())
    hyps = torch.tensor([[sos, 1, 2, 3], [sos, 4, 5, 0], [sos, 6, 0, 0]], dtype=torch.int64)
    hyps_lens = torch.tensor([4, 3, 2], dtype=torch.int64)
    encoder_out = torch.randn(1, 2 * chunk_size, encoder.output_size())
    reverse_weight = float(model.reverse_weight) if model.is_bidirectional_decoder() else 0.0
    decoder_axes = {"hyps": {0: "NUM_HYPS", 1: "L"}, "hyps_lens": {0: "NUM_HYPS"},
                    "encoder_out": {1: "T"}, "score": {0: "NUM_HYPS", 1: "L"}}
    if reverse_weight > 0.0:  # otherwise r_score is the placeholder scalar
        decoder_axes["r_score"] = {0: "NUM_HYPS", 1: "L"}
    _export(RescoringDecoderONNX(model, reverse_weight).eval(),
            (hyps, hyps_lens, encoder_out), paths["decoder"],
            ["hyps", "hyps_lens", "encoder_out"], ["score", "r_score"], decoder_axes)
    logging.info("exported %s", paths["decoder"])
    return paths

