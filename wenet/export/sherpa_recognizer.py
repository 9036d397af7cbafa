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
from typing import Any, Dict, List, Tuple

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


def _file(model_dir: str, name: str, int8: bool) -> str:
    if int8:
        name = name[:-len(".onnx")] + ".int8.onnx"
    path = os.path.join(model_dir, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing")
    return path


def _features(manifest: Dict[str, Any], spec: Dict[str, Any]):
    """The training features, with the sample scale the loader's graph expects (the one
    sherpa-onnx gives that loader by default)."""
    import sherpa_onnx
    return sherpa_onnx.FeatureExtractorConfig(normalize_samples=spec["normalize_samples"],
                                              **manifest["features"])


def offline_recognizer(model_dir: str, int8: bool = False, num_threads: int = 1):
    """A ``sherpa_onnx.OfflineRecognizer`` of the export's offline files (greedy search)."""
    import sherpa_onnx
    from sherpa_onnx.lib import _sherpa_onnx as so

    m = read_manifest(model_dir)
    spec = m["offline"]
    common = dict(tokens=os.path.join(model_dir, m["tokens"]), num_threads=num_threads,
                  provider="cpu")
    if spec["loader"] == "zipformer_ctc":
        model = so.OfflineModelConfig(zipformer_ctc=so.OfflineZipformerCtcModelConfig(
            model=_file(model_dir, spec["model"], int8)), **common)
    else:
        model = so.OfflineModelConfig(transducer=so.OfflineTransducerModelConfig(
            encoder_filename=_file(model_dir, spec["encoder"], int8),
            decoder_filename=_file(model_dir, spec["decoder"], int8),
            joiner_filename=_file(model_dir, spec["joiner"], int8)), **common)
    config = so.OfflineRecognizerConfig(feat_config=_features(m, spec), model_config=model,
                                        decoding_method="greedy_search")
    recognizer = sherpa_onnx.OfflineRecognizer.__new__(sherpa_onnx.OfflineRecognizer)
    recognizer.recognizer = so.OfflineRecognizer(config)
    recognizer.config = config
    return recognizer


def online_recognizer(model_dir: str, int8: bool = False, num_threads: int = 1):
    """A ``sherpa_onnx.OnlineRecognizer`` of the export's streaming files (greedy search);
    a ValueError when the model is not a streaming one."""
    import sherpa_onnx
    from sherpa_onnx.lib import _sherpa_onnx as so

    m = read_manifest(model_dir)
    if "online" not in m:
        raise ValueError(f"{model_dir}: no streaming files (the encoder was not trained "
                         "for chunks)")
    spec = m["online"]
    common = dict(tokens=os.path.join(model_dir, m["tokens"]), num_threads=num_threads)
    if spec["loader"] == "wenet_ctc":
        model = so.OnlineModelConfig(wenet_ctc=so.OnlineWenetCtcModelConfig(
            model=_file(model_dir, spec["model"], int8), chunk_size=spec["chunk_size"],
            num_left_chunks=spec["num_left_chunks"]), **common)
    else:
        model = so.OnlineModelConfig(transducer=so.OnlineTransducerModelConfig(
            encoder=_file(model_dir, spec["encoder"], int8),
            decoder=_file(model_dir, spec["decoder"], int8),
            joiner=_file(model_dir, spec["joiner"], int8)), **common)
    config = so.OnlineRecognizerConfig(feat_config=_features(m, spec), model_config=model,
                                       enable_endpoint=False, decoding_method="greedy_search")
    recognizer = sherpa_onnx.OnlineRecognizer.__new__(sherpa_onnx.OnlineRecognizer)
    recognizer.recognizer = so.OnlineRecognizer(config)
    recognizer.config = config
    return recognizer


def decode_offline(recognizer, samples: np.ndarray, sample_rate: int) -> Tuple[str, List[str]]:
    """(text, tokens) of one utterance (float samples in [-1, 1])."""
    stream = recognizer.create_stream()
    stream.accept_waveform(sample_rate, np.asarray(samples, dtype=np.float32))
    recognizer.decode_stream(stream)
    return stream.result.text, list(stream.result.tokens)


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
