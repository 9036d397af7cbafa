"""ONNX export of a trained model for CPU runtimes: a streaming encoder with
fixed-size caches, the CTC head, and the rescoring decoder (WeNet's CPU layout:
``encoder.onnx``, ``ctc.onnx``, ``decoder.onnx``).

Streaming design. ONNX graphs want fixed ranks and, ideally, fixed cache sizes,
so the encoder takes caches that are always ``required_cache_size =
chunk_size * left_chunks`` frames long. Before the cache has filled, its first
``required_cache_size - offset`` slots hold zeros; ``att_mask`` (False there)
keeps every query from attending to them, and their positional encodings are
clamped to position 0 (any value would do: those keys are masked). A real key
``j`` of the concatenated (cache + chunk) keys sits at absolute output position
``offset - required_cache_size + j``, the same position the eager
``forward_chunk`` gives it, so the output equals the eager chunk-by-chunk
output whose cache grows up to the same size. The causal convolution cache
starts as zeros, which is exactly the eager left padding. ``offset`` is an int64
tensor of shape (1,); positions past the positional table (5000 output frames,
200 s at 4x subsampling) are an error, as in eager mode.

Input and output names follow WeNet 2.x's ONNX CPU export, so its runtime can
feed them by name: encoder ``chunk, offset, att_cache, cnn_cache, att_mask ->
output, r_att_cache, r_cnn_cache``; CTC ``hidden -> probs``; decoder ``hyps,
hyps_lens, encoder_out -> score, r_score``.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import Dict, Tuple

import torch

from wenet.transformer.embedding import RelPositionalEncoding

OPSET = 17


def encoder_cache_shapes(model: torch.nn.Module, required_cache_size: int
                         ) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """Shapes of the fixed-size attention and convolution caches of ``model``'s encoder."""
    encoder = model.encoder
    layer = encoder.encoders[0]
    attn = layer.self_attn
    num_blocks = len(encoder.encoders)
    att_shape = (num_blocks, attn.h, required_cache_size, 2 * attn.d_k)
    conv = getattr(layer, "conv_module", None)
    if conv is not None and conv.lorder > 0:
        cnn_shape: Tuple[int, ...] = (num_blocks, 1, encoder.output_size(), conv.lorder)
    else:  # no causal convolution: nothing to carry (the graph ignores it)
        cnn_shape = (num_blocks, 1, encoder.output_size(), 0)
    return att_shape, cnn_shape


def chunk_attention_mask(offset: int, required_cache_size: int,
                         chunk_frames: int) -> torch.Tensor:
    """bool (1, 1, required_cache_size + chunk_frames): False on cache slots not yet
    filled after ``offset`` output frames, True elsewhere."""
    mask = torch.ones(1, 1, required_cache_size + chunk_frames, dtype=torch.bool)
    empty = max(required_cache_size - offset, 0)
    mask[:, :, :empty] = False
    return mask


class StreamingEncoderONNX(torch.nn.Module):
    """One encoder chunk step with fixed-size caches (see the module docstring).

    forward(chunk (1, T_in, D_in), offset int64 (1,), att_cache (L, H, R, 2*d_k),
    cnn_cache (L, 1, D, k-1), att_mask bool (1, 1, R + T')) ->
    (output (1, T', D), r_att_cache (same shape), r_cnn_cache (same shape)).
    """

    def __init__(self, encoder: torch.nn.Module, required_cache_size: int):
        super().__init__()
        if required_cache_size <= 0:
            raise ValueError(f"required_cache_size must be > 0, got {required_cache_size}")
        self.encoder = encoder
        self.required_cache_size = required_cache_size
        self.relative = isinstance(encoder.embed.pos_enc, RelPositionalEncoding)

    def _positions(self, offset: torch.Tensor, size: int) -> torch.Tensor:
        """PE rows (1, size, D) for output positions offset .. offset+size-1
        (negative positions, which only masked keys have, read row 0)."""
        pe = self.encoder.embed.pos_enc.pe[0]
        index = offset.reshape(1) + torch.arange(size, dtype=torch.int64)
        return pe.index_select(0, index.clamp(min=0)).unsqueeze(0)

    def forward(self, chunk: torch.Tensor, offset: torch.Tensor, att_cache: torch.Tensor,
                cnn_cache: torch.Tensor, att_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        encoder = self.encoder
        xs = chunk
        if encoder.global_cmvn is not None:
            xs = encoder.global_cmvn(xs)
        ones = torch.ones(1, 1, xs.size(1), dtype=torch.bool)
        # the subsampling adds PE rows 0.. (absolute encoding) or nothing (relative);
        # shift the absolute ones to this chunk's positions
        xs, _, _ = encoder.embed(xs, ones, 0)
        chunk_frames = xs.size(1)
        if not self.relative:
            xs = xs - encoder.embed.pos_enc.pe[:, :chunk_frames] \
                + self._positions(offset, chunk_frames)
        pos_emb = self._positions(offset - self.required_cache_size,
                                  self.required_cache_size + chunk_frames)
        use_cnn_cache = cnn_cache.size(3) > 0
        r_att_cache = []
        r_cnn_cache = []
        for i, layer in enumerate(encoder.encoders):
            layer_cnn_cache = cnn_cache[i] if use_cnn_cache else torch.zeros(0, 0, 0)
            xs, _, new_att_cache, new_cnn_cache = layer(
                xs, att_mask, pos_emb, att_cache=att_cache[i:i + 1],
                cnn_cache=layer_cnn_cache)
            r_att_cache.append(new_att_cache[:, :, -self.required_cache_size:, :])
            if use_cnn_cache:
                r_cnn_cache.append(new_cnn_cache.unsqueeze(0))
        if encoder.normalize_before:
            xs = encoder.after_norm(xs)
        new_cnn = torch.cat(r_cnn_cache, dim=0) if use_cnn_cache else cnn_cache
        return xs, torch.cat(r_att_cache, dim=0), new_cnn


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
    layer = encoder.encoders[0]
    conv = getattr(layer, "conv_module", None)
    subsampling = int(model.subsampling_rate())
    right_context = int(model.right_context())
    meta = {
        "output_size": encoder.output_size(),
        "num_blocks": len(encoder.encoders),
        "head": layer.self_attn.h,
        "cnn_module_kernel": conv.lorder + 1 if conv is not None and conv.lorder > 0 else 0,
        "subsampling_rate": subsampling,
        "right_context": right_context,
        "sos_symbol": int(model.sos_symbol()),
        "eos_symbol": int(model.eos_symbol()),
        "is_bidirectional_decoder": int(model.is_bidirectional_decoder()),
        "reverse_weight": float(model.reverse_weight),
        "chunk_size": chunk_size,
        "left_chunks": left_chunks,
        "required_cache_size": chunk_size * left_chunks,
        "decoding_window": (chunk_size - 1) * subsampling + right_context + 1,
        "vocab_size": int(model.vocab_size),
    }
    return {k: str(v) for k, v in meta.items()}


def _add_metadata(path: str, meta: Dict[str, str]) -> None:
    import onnx  # local: only export needs it

    proto = onnx.load(path)
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key = key
        entry.value = value
    onnx.checker.check_model(proto)
    onnx.save(proto, path)


def _export(module: torch.nn.Module, args: tuple, path: str, input_names, output_names,
            dynamic_axes) -> None:
    """torch.onnx.export through a temporary name (no half-written model on failure).

    The TorchScript-based exporter (dynamo=False) is used: the graphs are
    small, its dynamic_axes cover the varying lengths, and it needs no guards
    on the data-dependent offset.
    """
    tmp = f"{path}.tmp"
    # TracerWarnings flag Python branches on shapes; here they depend only on
    # the model and the fixed cache size, never on the chunk length or offset
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(module, args, tmp, dynamo=False, opset_version=OPSET,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, do_constant_folding=True)
    os.replace(tmp, path)


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
    if not (encoder.use_dynamic_chunk or encoder.static_chunk_size > 0):
        logging.warning("the model was not trained for chunks (no use_dynamic_chunk or "
                        "static_chunk_size): streaming output will differ from full context")
    model = model.eval()
    os.makedirs(output_dir, exist_ok=True)
    paths = {name: os.path.join(output_dir, f"{name}.onnx")
             for name in ("encoder", "ctc", "decoder")}
    required = chunk_size * left_chunks
    att_shape, cnn_shape = encoder_cache_shapes(model, required)
    subsampling = int(model.subsampling_rate())
    window = (chunk_size - 1) * subsampling + int(model.right_context()) + 1

    chunk = torch.randn(1, window, feat_dim)
    offset = torch.tensor([required], dtype=torch.int64)  # a full cache while tracing
    args = (chunk, offset, torch.zeros(att_shape), torch.zeros(cnn_shape),
            chunk_attention_mask(required, required, chunk_size))
    _export(StreamingEncoderONNX(encoder, required).eval(), args, paths["encoder"],
            ["chunk", "offset", "att_cache", "cnn_cache", "att_mask"],
            ["output", "r_att_cache", "r_cnn_cache"],
            {"chunk": {1: "T"}, "att_mask": {2: "T_ADD_T_CACHE"}, "output": {1: "T_OUT"}})
    _add_metadata(paths["encoder"], encoder_metadata(model, chunk_size, left_chunks))
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

