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

Features: sherpa-onnx computes fbank itself (kaldi-native-fbank). The sample scale each
loader gets by default is handled in the graphs: those of loaders that see samples in
[-1, 1] (Zipformer CTC, transducers) turn their log energies into the int16 scale's
(``sherpa_graphs.int16_range_fbank``); the WeNet CTC loader itself feeds int16-range
samples. The rest must be configured as in ``sherpa-onnx.json`` (``features``):
``snip_edges`` true, mel banks 20 Hz to Nyquist (``high_freq`` 0), no dither, where
sherpa-onnx's defaults are ``snip_edges`` false and ``high_freq`` -400; its C API (and so
the Android, iOS, Go, C#... bindings) sets only the rate and the bin count
(docs/deploy.md).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any, Dict, Mapping

import torch

from wenet.dataset.fbank import FeatureConf
from wenet.export.onnx_common import (DEFAULT_SAMPLE_RATE, export_graph, has_ctc,
                                      is_transducer, predictor_state_layout)
from wenet.export.onnx import remove_stale
from wenet.export.onnx_offline import tracing_batch
from wenet.export.onnx_transducer import JoinerONNX
from wenet.export.sherpa_graphs import (DecoderSherpa, FullContextSherpa, OnlineCtcSherpa,
                                        StreamingTransducerEncoderSherpa,
                                        conformer_transducer_caches, wenet_ctc_caches)

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
            "dither": 0.0, "snip_edges": True}


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


def _entry(loader: str, normalize_samples: bool, **files: str) -> Dict[str, Any]:
    """A recognizer of ``sherpa-onnx.json``: its loader, its files (role -> file), and the
    sample scale its graphs expect (sherpa-onnx's default for that loader)."""
    return {"loader": loader, **{role: f"{name}.onnx" for role, name in files.items()},
            "normalize_samples": normalize_samples}


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
        manifest["offline"] = _entry("transducer", True, encoder="encoder", decoder="decoder",
                                     joiner="joiner")
        if streaming:
            paths["encoder-streaming"] = path_of("encoder-streaming")
            _export_streaming_transducer(model, configs, paths["encoder-streaming"], feat_dim,
                                         chunk_size, left_chunks)
            manifest["online"] = _entry("transducer", True, encoder="encoder-streaming",
                                        decoder="decoder", joiner="joiner")
    else:
        paths = {"model": path_of("model")}
        _export_full_context(model, configs, paths["model"], feat_dim, ctc=True)
        manifest["offline"] = _entry("zipformer_ctc", True, model="model")
        if streaming:
            paths["model-streaming"] = path_of("model-streaming")
            _export_streaming_ctc(model, configs, paths["model-streaming"], feat_dim,
                                  chunk_size, left_chunks)
            manifest["online"] = _entry("wenet_ctc", False, model="model-streaming")
            manifest["online"].update(chunk_size=chunk_size, num_left_chunks=left_chunks)
    if not streaming:
        logging.info("no streaming sherpa-onnx files: the %s encoder was not trained for "
                     "chunks", configs.get("encoder", "conformer"))
    if int8:
        from wenet.export.onnx_quant import quantize_file  # local: needs onnxruntime
        for name in list(paths):
            paths[f"{name}.int8"] = path_of(f"{name}.int8")
            quantize_file(paths[name], paths[f"{name}.int8"])
    remove_stale(output_dir, paths, GRAPH_NAMES)
    shutil.copyfile(units, os.path.join(output_dir, TOKENS_NAME))
    with open(os.path.join(output_dir, MANIFEST_NAME), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return paths


def _export_full_context(model: torch.nn.Module, configs: Mapping[str, Any], path: str,
                         feat_dim: int, ctc: bool) -> None:
    """The offline CTC model (``ctc``: x, x_lens -> log_probs, log_probs_len) or the
    offline transducer encoder (-> encoder_out, encoder_out_lens)."""
    out, lens = ("log_probs", "log_probs_len") if ctc else ("encoder_out", "encoder_out_lens")
    export_graph(FullContextSherpa(model, ctc), tracing_batch(model.encoder, feat_dim), path,
                 ["x", "x_lens"], [out, lens],
                 {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, out: {0: "N", 1: "T_OUT"},
                  lens: {0: "N"}},
                 _base_metadata(model, configs, "zipformer2_ctc" if ctc else "conformer"))


def _export_transducer(model: torch.nn.Module, configs: Mapping[str, Any], path_of,
                       feat_dim: int) -> Dict[str, str]:
    """encoder.onnx, decoder.onnx and joiner.onnx of a stateless transducer."""
    paths = {n: path_of(n) for n in ("encoder", "decoder", "joiner")}
    _export_full_context(model, configs, paths["encoder"], feat_dim, ctc=False)
    context = int(predictor_state_layout(model)[0].shape[1]) + 1
    meta = _base_metadata(model, configs, "conformer")
    meta["context_size"] = str(context)
    y = torch.tensor([[-1] * (context - 1) + [0], [3] * context, [1] * context])
    export_graph(DecoderSherpa(model), (y,), paths["decoder"], ["y"], ["decoder_out"],
                 {"y": {0: "N"}, "decoder_out": {0: "N"}}, meta)
    join_dim = int(model.joint.enc_proj.out_features)
    export_graph(JoinerONNX(model), (torch.randn(3, join_dim), torch.randn(3, join_dim)),
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
