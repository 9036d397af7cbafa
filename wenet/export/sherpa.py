"""Export for sherpa-onnx (``export_onnx.py --target sherpa-onnx``): the files, input and
output names, shapes and metadata that sherpa-onnx's own loaders read (checked against
its source and run with sherpa-onnx 2.0.1's Python API), plus ``tokens.txt`` and
``sherpa-onnx.json`` (which loader takes which file, the chunking, the features).

=======================  ====================  ==========================================
model                    files                 sherpa-onnx loader (``model_type``)
=======================  ====================  ==========================================
CTC (every encoder)      model.onnx            offline Zipformer CTC (``zipformer2_ctc``):
                                               x, x_lens -> log_probs, log_probs_len
streaming CTC (U2/U2++   model-streaming.onnx  online WeNet CTC (``wenet_ctc``): x, offset,
chunked, causal                                required_cache_size, attn_cache,
Zipformer)                                     conv_cache, attn_mask -> log_probs, caches
transducer (stateless    encoder.onnx,         offline transducer (``conformer``): the
predictor)               decoder.onnx,         encoder output already through the joint's
                         joiner.onnx           encoder projection, the decoder's through
                                               its predictor projection
streaming transducer     encoder-streaming     online conformer transducer (``conformer``):
                         .onnx (+ the same     x, cached_att, cached_conv, processed_frames
                         decoder and joiner)   -> encoder_out, caches
=======================  ====================  ==========================================

Why these loaders. sherpa-onnx's offline WeNet CTC recognizer forces ``dither = 1`` on its
features (2.0.1), so its text varies from run to run; its Zipformer CTC loader takes the
same (x, x_lens) graph with the features as configured. Streaming, the WeNet CTC loader
drives WeNet's chunk signature, which our chunk step already is: only the offset differs
(sherpa-onnx starts it at ``required_cache_size``). Our caches are packed into the shapes
each loader allocates from the metadata (a flat copy, zero-padded; the U2 encoders' caches
fit as they are), so the causal Zipformer runs through the same loaders. The transducer
loaders want icefall's stateless decoder: ``context_size`` previous tokens in, where
sherpa-onnx writes -1 for "none yet" (read here as the blank our predictor starts from);
LSTM predictors and multi-blank transducers have no sherpa-onnx counterpart and are refused.

Features: sherpa-onnx computes fbank itself (kaldi-native-fbank). To give the model what it
was trained on, the recognizer must be configured with the options in ``sherpa-onnx.json``
(``features``): int16-range samples (``normalize_samples`` false), ``snip_edges`` true, mel
banks 20 Hz to Nyquist (``high_freq`` 0), no dither. sherpa-onnx's defaults differ
(``snip_edges`` false, ``high_freq`` -400); its C API (and so the Android, iOS, Go, C#...
bindings) exposes only the rate and the bin count (docs/deploy.md).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Tuple

import torch

from wenet.dataset.fbank import FeatureConf
from wenet.export.onnx_common import (DEFAULT_SAMPLE_RATE, export_graph, has_ctc,
                                      is_transducer, predictor_state_layout)
from wenet.export.onnx_offline import tracing_batch
from wenet.export.onnx_streaming import StreamingEncoderONNX

VERIFIED_VERSION = "2.0.1"
MANIFEST_NAME = "sherpa-onnx.json"
TOKENS_NAME = "tokens.txt"
GRAPH_NAMES = ("model", "model-streaming", "encoder", "encoder-streaming", "decoder", "joiner")


def sherpa_features(configs: Mapping[str, Any]) -> Dict[str, Any]:
    """sherpa-onnx ``FeatureExtractorConfig`` options that reproduce the training fbank
    (wenet/dataset/fbank.py without dither); a ValueError for frame sizes that sherpa-onnx
    cannot be given (its Python config fixes 25 ms / 10 ms)."""
    conf = FeatureConf.from_config(configs)
    if (conf.frame_length, conf.frame_shift) != (25.0, 10.0):
        raise ValueError(f"fbank_conf frame_length {conf.frame_length:g} ms / frame_shift "
                         f"{conf.frame_shift:g} ms: sherpa-onnx's feature config has 25 / 10 ms")
    return {"sampling_rate": conf.resample_rate or DEFAULT_SAMPLE_RATE,
            "feature_dim": conf.num_mel_bins, "low_freq": 20.0, "high_freq": 0.0,
            "dither": 0.0, "normalize_samples": False, "snip_edges": True}


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


class OfflineCtcSherpa(torch.nn.Module):
    """x (N, T, F), x_lens (N,) -> log_probs (N, T', V), log_probs_len (N,)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        out, mask = self.model.encoder(x, x_lens, -1, -1)
        return self.model.ctc_activation(out), mask.squeeze(1).sum(1).to(torch.int64)


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


class TransducerEncoderSherpa(torch.nn.Module):
    """x (N, T, F), x_lens (N,) -> encoder_out (N, T', J) projected, encoder_out_lens."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        out, mask = self.model.encoder(x, x_lens, -1, -1)
        return self.model.project_encoder(out), mask.squeeze(1).sum(1).to(torch.int64)


class StreamingTransducerEncoderSherpa(torch.nn.Module):
    """sherpa-onnx's online conformer transducer encoder step: x (1, T, F), the two caches
    (batch on dim 2), processed_frames (1,) input frames before this chunk ->
    (encoder_out (1, chunk_size, J) projected, the next caches)."""

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
        out, att, cnn = self.step(x, offset, self.att.unpack(cached_att),
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


class JoinerSherpa(torch.nn.Module):
    """encoder_out (N, J), decoder_out (N, J) -> logit (N, V)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        return self.model.forward_joint_step(encoder_out, decoder_out)


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


def check_exportable(model: torch.nn.Module) -> None:
    """ValueError naming what sherpa-onnx has no loader for."""
    if not is_transducer(model):
        if not has_ctc(model):
            raise ValueError("sherpa-onnx export needs a CTC head or a transducer")
        return
    states = predictor_state_layout(model)
    if len(states) != 1 or states[0].dtype != torch.int64:
        raise ValueError("sherpa-onnx's transducer decoder is icefall's stateless one "
                         "(context_size previous tokens): an LSTM predictor has no "
                         "sherpa-onnx loader (train with predictor: stateless)")
    if list(model.big_blank_ids()):
        raise ValueError("sherpa-onnx's transducer searches know one blank: a multi-blank "
                         "transducer (big_blank_durations) cannot be exported for them")
    if int(model.blank_symbol()) != 0:
        raise ValueError(f"sherpa-onnx's transducer searches take blank id 0, the model's is "
                         f"{int(model.blank_symbol())}")


def _base_metadata(model: torch.nn.Module, configs: Mapping[str, Any],
                   model_type: str) -> Dict[str, str]:
    meta = {"model_type": model_type, "vocab_size": int(model.vocab_size),
            "subsampling_factor": int(model.subsampling_rate()),
            "right_context": int(model.right_context()),
            "encoder": configs.get("encoder", "conformer"),
            "comment": "exported by wenet/bin/export_onnx.py --target sherpa-onnx",
            "sherpa_onnx_verified": VERIFIED_VERSION}
    return {k: str(v) for k, v in meta.items()}


def export_sherpa_onnx(model: torch.nn.Module, configs: Mapping[str, Any], output_dir: str,
                       units: str, chunk_size: int = 16, left_chunks: int = 4,
                       int8: bool = False) -> Dict[str, str]:
    """Write the sherpa-onnx files of ``model`` into ``output_dir`` (the table above),
    ``tokens.txt`` (a copy of ``units``) and ``sherpa-onnx.json``; streaming files only for
    a streaming encoder, with ``chunk_size`` output frames per chunk and ``left_chunks``
    chunks of cache; with ``int8`` each graph's ``*.int8.onnx`` too. Returns {name: path}."""
    model = model.eval()
    check_exportable(model)
    features = sherpa_features(configs)
    os.makedirs(output_dir, exist_ok=True)
    path_of = lambda name: os.path.join(output_dir, f"{name}.onnx")  # noqa: E731
    feat_dim = int(configs["input_dim"])
    streaming = model.encoder.is_streaming()
    manifest: Dict[str, Any] = {"sherpa_onnx_verified": VERIFIED_VERSION,
                                "tokens": TOKENS_NAME, "features": features}
    if is_transducer(model):
        paths = _export_transducer(model, configs, path_of, feat_dim)
        manifest["offline"] = {"loader": "transducer", "encoder": "encoder.onnx",
                               "decoder": "decoder.onnx", "joiner": "joiner.onnx"}
        if streaming:
            paths["encoder-streaming"] = path_of("encoder-streaming")
            _export_streaming_transducer(model, configs, paths["encoder-streaming"], feat_dim,
                                         chunk_size, left_chunks)
            manifest["online"] = {"loader": "transducer", "encoder": "encoder-streaming.onnx",
                                  "decoder": "decoder.onnx", "joiner": "joiner.onnx"}
    else:
        paths = {"model": path_of("model")}
        x, x_lens = tracing_batch(model.encoder, feat_dim)
        export_graph(OfflineCtcSherpa(model), (x, x_lens), paths["model"], ["x", "x_lens"],
                     ["log_probs", "log_probs_len"],
                     {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"},
                      "log_probs": {0: "N", 1: "T_OUT"}, "log_probs_len": {0: "N"}},
                     _base_metadata(model, configs, "zipformer2_ctc"))
        manifest["offline"] = {"loader": "zipformer_ctc", "model": "model.onnx"}
        if streaming:
            paths["model-streaming"] = path_of("model-streaming")
            _export_streaming_ctc(model, configs, paths["model-streaming"], feat_dim,
                                  chunk_size, left_chunks)
            manifest["online"] = {"loader": "wenet_ctc", "model": "model-streaming.onnx",
                                  "chunk_size": chunk_size, "num_left_chunks": left_chunks}
    if not streaming:
        logging.info("no streaming sherpa-onnx files: the %s encoder was not trained for "
                     "chunks", configs.get("encoder", "conformer"))
    if int8:
        from wenet.export.onnx_quant import quantize_file  # local: needs onnxruntime
        for name in list(paths):
            paths[f"{name}.int8"] = path_of(f"{name}.int8")
            quantize_file(paths[name], paths[f"{name}.int8"])
    _remove_stale(output_dir, paths)
    shutil.copyfile(units, os.path.join(output_dir, TOKENS_NAME))
    with open(os.path.join(output_dir, MANIFEST_NAME), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return paths


def _export_transducer(model: torch.nn.Module, configs: Mapping[str, Any], path_of,
                       feat_dim: int) -> Dict[str, str]:
    """encoder.onnx, decoder.onnx and joiner.onnx of a stateless transducer."""
    paths = {n: path_of(n) for n in ("encoder", "decoder", "joiner")}
    x, x_lens = tracing_batch(model.encoder, feat_dim)
    export_graph(TransducerEncoderSherpa(model), (x, x_lens), paths["encoder"],
                 ["x", "x_lens"], ["encoder_out", "encoder_out_lens"],
                 {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"},
                  "encoder_out": {0: "N", 1: "T_OUT"}, "encoder_out_lens": {0: "N"}},
                 _base_metadata(model, configs, "conformer"))
    context = int(predictor_state_layout(model)[0].shape[1]) + 1
    meta = _base_metadata(model, configs, "conformer")
    meta["context_size"] = str(context)
    y = torch.tensor([[-1] * (context - 1) + [0], [3] * context, [1] * context])
    export_graph(DecoderSherpa(model), (y,), paths["decoder"], ["y"], ["decoder_out"],
                 {"y": {0: "N"}, "decoder_out": {0: "N"}}, meta)
    join_dim = int(model.joint.enc_proj.out_features)
    export_graph(JoinerSherpa(model), (torch.randn(3, join_dim), torch.randn(3, join_dim)),
                 paths["joiner"], ["encoder_out", "decoder_out"], ["logit"],
                 {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}},
                 _base_metadata(model, configs, "conformer"))
    return paths


def _chunking(model: torch.nn.Module, chunk_size: int, left_chunks: int):
    if chunk_size <= 0 or left_chunks <= 0:
        raise ValueError("sherpa-onnx streaming export needs chunk_size > 0 and "
                         f"left_chunks > 0 (fixed-size caches), got {chunk_size}, {left_chunks}")
    encoder = model.encoder
    encoder.check_streaming_chunk(chunk_size)
    window = encoder.chunk_window(chunk_size, left_chunks)
    att_shape, cnn_shape = encoder.streaming_cache_shapes(window.required_cache_size)
    return window, tuple(att_shape), tuple(cnn_shape)


def _export_streaming_ctc(model: torch.nn.Module, configs: Mapping[str, Any], path: str,
                          feat_dim: int, chunk_size: int, left_chunks: int) -> None:
    window, att_shape, cnn_shape = _chunking(model, chunk_size, left_chunks)
    required = window.required_cache_size
    meta_caches, att, cnn = wenet_ctc_caches(att_shape, cnn_shape, required)
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(1, window.window, feat_dim, generator=g),
            torch.tensor([2 * required], dtype=torch.int64),  # a full cache while tracing
            torch.tensor([required], dtype=torch.int64),
            torch.randn(att.theirs, generator=g), torch.randn(cnn.theirs, generator=g),
            torch.ones(1, 1, required + chunk_size, dtype=torch.bool))
    meta = _base_metadata(model, configs, "wenet_ctc")
    meta.update({k: str(v) for k, v in meta_caches.items()})
    meta.update(chunk_size=str(chunk_size), left_chunks=str(left_chunks))
    export_graph(OnlineCtcSherpa(model, required, att, cnn), args, path,
                 ["x", "offset", "required_cache_size", "attn_cache", "conv_cache",
                  "attn_mask"], ["log_probs", "next_att_cache", "next_conv_cache"],
                 {"x": {1: "T"}}, meta)


def _export_streaming_transducer(model: torch.nn.Module, configs: Mapping[str, Any],
                                 path: str, feat_dim: int, chunk_size: int,
                                 left_chunks: int) -> None:
    window, att_shape, cnn_shape = _chunking(model, chunk_size, left_chunks)
    required = window.required_cache_size
    meta_caches, att, cnn = conformer_transducer_caches(att_shape, cnn_shape,
                                                        model.encoder.output_size())
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(1, window.window, feat_dim, generator=g),
            torch.randn(att.theirs, generator=g), torch.randn(cnn.theirs, generator=g),
            torch.tensor([window.stride * left_chunks], dtype=torch.int64))
    meta = _base_metadata(model, configs, "conformer")
    meta.update({k: str(v) for k, v in meta_caches.items()})
    meta.update(T=str(window.window), decode_chunk_len=str(window.stride),
                chunk_size=str(chunk_size), left_chunks=str(left_chunks))
    export_graph(StreamingTransducerEncoderSherpa(model, chunk_size, required, att, cnn),
                 args, path, ["x", "cached_att", "cached_conv", "processed_frames"],
                 ["encoder_out", "next_cached_att", "next_cached_conv"], {}, meta)


def _remove_stale(output_dir: str, written: Mapping[str, str]) -> None:
    """Remove this format's files an earlier export left that this one did not write."""
    for name in GRAPH_NAMES:
        for variant in (name, f"{name}.int8"):
            path = os.path.join(output_dir, f"{variant}.onnx")
            if variant not in written and os.path.isfile(path):
                os.remove(path)
                logging.warning("removed %s, left by an earlier export (not part of this "
                                "model's export)", path)
