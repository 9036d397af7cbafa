"""sherpa-onnx recognizers of a ``--target sherpa-onnx`` export, configured from its
``sherpa-onnx.json`` (the loader of each file, the chunking, the training features), and
whole-utterance decoding with them. sherpa-onnx is imported here only: the toolkit does
not need it (tests, bench/sherpa_parity.py and docs/deploy.md use this module).

The Python factories (``OfflineRecognizer.from_zipformer_ctc``...) do not take every
feature option, so the recognizers are built from sherpa-onnx's config classes.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from wenet.export.sherpa import MANIFEST_NAME


def read_manifest(model_dir: str) -> Dict[str, Any]:
    """``sherpa-onnx.json`` of an export; FileNotFoundError naming the dir without one."""
    path = os.path.join(model_dir, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{model_dir}: no {MANIFEST_NAME} (export with "
                                "wenet/bin/export_onnx.py --target sherpa-onnx)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _files(model_dir: str, spec: Dict[str, Any], int8: bool) -> Dict[str, str]:
    """role (model, encoder, decoder, joiner) -> path of a recognizer's ONNX files."""
    out = {}
    for role, name in spec.items():
        if not (isinstance(name, str) and name.endswith(".onnx")):
            continue
        if int8:
            name = name[:-len(".onnx")] + ".int8.onnx"
        out[role] = os.path.join(model_dir, name)
        if not os.path.isfile(out[role]):
            raise FileNotFoundError(f"{out[role]} is missing")
    return out


def _features(manifest: Dict[str, Any], spec: Dict[str, Any], c_api: bool):
    """The training features, with the sample scale the loader's graph expects (the one
    sherpa-onnx gives that loader by default); ``c_api``: what sherpa-onnx's C API (and
    the bindings on it) sets, the rate and the bins, the rest its defaults."""
    import sherpa_onnx
    features = manifest["features"]
    if c_api:
        return sherpa_onnx.FeatureExtractorConfig(
            sampling_rate=features["sampling_rate"], feature_dim=features["feature_dim"])
    return sherpa_onnx.FeatureExtractorConfig(normalize_samples=spec["normalize_samples"],
                                              **features)


def _wrapped(cls, impl, config):
    """sherpa-onnx's Python recognizer ``cls`` around ``impl(config)``, as its factories
    make it."""
    recognizer = cls.__new__(cls)
    recognizer.recognizer, recognizer.config = impl(config), config
    return recognizer


def offline_recognizer(model_dir: str, int8: bool = False, num_threads: int = 1,
                       c_api_features: bool = False):
    """A ``sherpa_onnx.OfflineRecognizer`` of the export's offline files (greedy search);
    ``c_api_features``: with the features the C API bindings give (see ``_features``)."""
    import sherpa_onnx
    from sherpa_onnx.lib import _sherpa_onnx as so

    m = read_manifest(model_dir)
    spec = m["offline"]
    common = dict(tokens=os.path.join(model_dir, m["tokens"]), num_threads=num_threads,
                  provider="cpu")
    files = _files(model_dir, spec, int8)
    if spec["loader"] == "zipformer_ctc":
        model = so.OfflineModelConfig(zipformer_ctc=so.OfflineZipformerCtcModelConfig(
            model=files["model"]), **common)
    else:
        model = so.OfflineModelConfig(transducer=so.OfflineTransducerModelConfig(
            files["encoder"], files["decoder"], files["joiner"]), **common)
    config = so.OfflineRecognizerConfig(feat_config=_features(m, spec, c_api_features),
                                        model_config=model, decoding_method="greedy_search")
    return _wrapped(sherpa_onnx.OfflineRecognizer, so.OfflineRecognizer, config)


def online_recognizer(model_dir: str, int8: bool = False, num_threads: int = 1,
                      c_api_features: bool = False):
    """A ``sherpa_onnx.OnlineRecognizer`` of the export's streaming files (greedy search);
    a ValueError when the model is not a streaming one. ``c_api_features``: as
    ``offline_recognizer``'s."""
    import sherpa_onnx
    from sherpa_onnx.lib import _sherpa_onnx as so

    m = read_manifest(model_dir)
    if "online" not in m:
        raise ValueError(f"{model_dir}: no streaming files (the encoder was not trained "
                         "for chunks)")
    spec = m["online"]
    common = dict(tokens=os.path.join(model_dir, m["tokens"]), num_threads=num_threads)
    files = _files(model_dir, spec, int8)
    if spec["loader"] == "wenet_ctc":
        model = so.OnlineModelConfig(wenet_ctc=so.OnlineWenetCtcModelConfig(
            model=files["model"], chunk_size=spec["chunk_size"],
            num_left_chunks=spec["num_left_chunks"]), **common)
    else:
        model = so.OnlineModelConfig(transducer=so.OnlineTransducerModelConfig(**files),
                                     **common)
    config = so.OnlineRecognizerConfig(feat_config=_features(m, spec, c_api_features),
                                       model_config=model, enable_endpoint=False,
                                       decoding_method="greedy_search")
    return _wrapped(sherpa_onnx.OnlineRecognizer, so.OnlineRecognizer, config)


def decode_offline(recognizer, samples: np.ndarray, sample_rate: int) -> Tuple[str, List[str]]:
    """(text, tokens) of one utterance (float samples in [-1, 1])."""
    stream = recognizer.create_stream()
    stream.accept_waveform(sample_rate, np.asarray(samples, dtype=np.float32))
    recognizer.decode_stream(stream)
    return stream.result.text, list(stream.result.tokens)


def decode_offline_batch(recognizer, utterances: List[Tuple[np.ndarray, int]]
                         ) -> List[Tuple[str, List[str]]]:
    """(text, tokens) of several utterances decoded as one padded batch
    (``decode_streams``)."""
    streams = []
    for samples, rate in utterances:
        streams.append(recognizer.create_stream())
        streams[-1].accept_waveform(rate, np.asarray(samples, dtype=np.float32))
    recognizer.decode_streams(streams)
    return [(s.result.text, list(s.result.tokens)) for s in streams]


def decode_online(recognizer, samples: np.ndarray, sample_rate: int) -> Tuple[str, List[str]]:
    """(text, tokens) of one utterance fed as a stream, then ended. sherpa-onnx decodes
    whole chunks only: the frames after the last whole chunk are not decoded (its
    examples append silence for that)."""
    stream = recognizer.create_stream()
    stream.accept_waveform(sample_rate, np.asarray(samples, dtype=np.float32))
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    result = recognizer.get_result_all(stream)
    return result.text, list(result.tokens)


def whole_chunks(samples: np.ndarray, window, frame_length: int = 400,
                 frame_shift: int = 160, pad: bool = True) -> np.ndarray:
    """``samples`` cut so that sherpa-onnx's online recognizer decodes every frame: it
    runs a chunk only when more frames than its window are there, so the last whole
    chunk's window is followed by exactly one frame (``window``: the export's
    ``ChunkWindow``; frames of ``frame_length`` samples every ``frame_shift``). With
    ``pad`` digital silence is appended first, so no audio is left undecoded."""
    if pad:
        extra = (window.window + window.stride) * frame_shift
        samples = np.concatenate([samples, np.zeros(extra, dtype=samples.dtype)])
    frames = 1 + (len(samples) - frame_length) // frame_shift
    whole = (frames - window.window - 1) // window.stride
    if whole < 0:
        raise ValueError(f"{len(samples)} samples are shorter than one chunk")
    frames = whole * window.stride + window.window + 1
    return samples[:frame_length + frame_shift * (frames - 1)]


class _ChunkwiseJoint:
    """Our runtime's transducer graphs with the encoder projection run on each ``chunk``
    frames (0: all at once); ``blanks`` are more units read as a blank (big blanks of one
    frame)."""

    def __init__(self, net, chunk: int, blanks: Sequence[int] = ()) -> None:
        self.net, self.chunk = net, chunk
        self.blank_id = net.blank_id
        self.big_blank_ids = list(net.big_blank_ids) + list(blanks)
        self.big_blank_durations = list(net.big_blank_durations) + [1] * len(blanks)
        self.predictor_init_state = net.predictor_init_state
        self.predictor_step, self.joint = net.predictor_step, net.joint

    def project_encoder(self, encoder_out: np.ndarray) -> np.ndarray:
        step = self.chunk or encoder_out.shape[1]
        return np.concatenate([self.net.project_encoder(encoder_out[:, s:s + step])
                               for s in range(0, encoder_out.shape[1], step)], axis=1)


def runtime_greedy_ids(model, feats: np.ndarray, streaming: bool = False,
                       unk_as_blank: Optional[int] = None) -> List[int]:
    """Our runtime's greedy search (CTC or transducer) of one utterance's fbank, what the
    sherpa-onnx recognizers are compared with. ``streaming``: encoded chunk by chunk
    (``model`` loaded with ``streaming=True``) and the CTC head / the joint's encoder
    projection run on each chunk's output as it comes, as in a stream.
    (``OnnxRecognizer(streaming=True)`` runs them once on the whole output: the same in
    float32, but the int8 files quantise activations with one range per tensor, so a head
    run on the whole utterance rounds differently.) ``unk_as_blank``: a unit the
    transducer search reads as a blank (sherpa-onnx does so with ``<unk>``)."""
    from wenet.runtime import ctc_search, transducer_search

    encode = model.encode_streaming if streaming else model.encode
    out, lens = encode([feats])
    chunk = model.chunks.window.chunk_size if streaming else 0
    if model.info.model_type != "transducer":
        step = chunk or out.shape[1]
        logp = np.concatenate([model.ctc_logprobs(out[:, s:s + step])
                               for s in range(0, out.shape[1], step)], axis=1)
        return ctc_search.ctc_greedy_search(logp, lens, model.info.blank_id)[0]
    blanks = [] if unk_as_blank is None else [unk_as_blank]
    net = _ChunkwiseJoint(model.transducer(), chunk, blanks)
    return transducer_search.rnnt_greedy_search(net, out, lens)[0]
