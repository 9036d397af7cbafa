"""The model a server streams with: loaded from a model directory (TorchScript or a
checkpoint) or an exported ONNX directory, and checked for streaming."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from wenet.dataset.fbank import FeatureConf
from wenet.dataset.tokenizer import Tokenizer
from wenet.inference.loader import LoadedModel, load_model_dir
from wenet.inference.stream_search import is_transducer_model
from wenet.inference.streaming import is_streaming_model

if TYPE_CHECKING:  # onnxruntime is needed only with --onnx_dir (requirements-runtime.txt)
    from wenet.serve.onnx_model import OnnxStreamingModel


class NotServableError(ValueError):
    """A model the streaming server cannot serve, with the reason."""


def load_streaming_model(path: str, checkpoint: Optional[str] = None) -> LoadedModel:
    """A model directory's model, tokenizer and features (``load_model_dir``: ``final.zip``
    unless ``checkpoint`` is named), refused with NotServableError when the server could
    not stream it: an encoder not trained to run chunk by chunk (the model's
    ``is_streaming()``: U2/U2++ without ``use_dynamic_chunk`` / ``static_chunk_size``, a
    Zipformer without ``causal``; chunk-by-chunk output would not be what the model
    learnt), features at a rate other than 16 kHz. CTC + attention models and transducers
    are served alike."""
    loaded = load_model_dir(path, device="cpu", checkpoint=checkpoint)
    if not is_streaming_model(loaded.model, loaded.configs):
        raise NotServableError(
            f"{path}: not a streaming model (its encoder was not trained to run chunk by "
            "chunk: a U2/U2++ encoder needs use_dynamic_chunk or static_chunk_size > 0, a "
            "Zipformer causal: true), so chunk-by-chunk output would not be what it learnt; "
            "train one with conf/train_u2++_conformer.yaml or "
            "conf/train_zipformer_streaming.yaml, or use wenet/bin/recognize.py for this model")
    rate = loaded.feature_conf.resample_rate
    if rate not in (None, 16000):
        raise NotServableError(f"{path}: the model's features are at {rate} Hz; the server "
                               "takes 16 kHz audio only")
    logging.info("serving %s (%s, %s)", path, "TorchScript" if loaded.scripted else "checkpoint",
                 "transducer" if is_transducer_model(loaded.model) else "CTC + attention")
    return loaded


@dataclass
class ServedOnnxModel:
    """What the server needs of an ONNX model directory (``LoadedModel``'s fields it reads)."""

    model: OnnxStreamingModel
    tokenizer: Tokenizer
    feature_conf: FeatureConf


def load_onnx_streaming_model(onnx_dir: str, int8: bool = False,
                              num_threads: int = 1) -> ServedOnnxModel:
    """An exported ONNX directory (wenet/bin/export_onnx.py) ready to stream; refused with
    NotServableError when it has no ``encoder_chunk.onnx`` (the export writes one for
    streaming models only) or its features are not at 16 kHz."""
    from wenet.runtime.recognizer import model_tokenizer
    from wenet.runtime.session import OnnxModel
    from wenet.serve.onnx_model import streaming_model
    if not os.path.isfile(os.path.join(onnx_dir, "encoder_chunk.onnx")):
        raise NotServableError(
            f"{onnx_dir}: no encoder_chunk.onnx, so not a streaming model (the export writes "
            "it only for encoders trained to run chunk by chunk: U2/U2++ with "
            "use_dynamic_chunk or static_chunk_size, a causal Zipformer)")
    onnx = OnnxModel(onnx_dir, int8=int8, num_threads=num_threads, streaming=True)
    feats = onnx.info.features
    if feats.sample_rate != 16000:
        raise NotServableError(f"{onnx_dir}: the model's features are at {feats.sample_rate} "
                               "Hz; the server takes 16 kHz audio only")
    tokenizer = model_tokenizer(onnx)
    model = streaming_model(onnx)
    logging.info("serving %s (ONNX%s, %s, chunk_size %d, left_chunks %d)", onnx_dir,
                 " int8" if int8 else "", onnx.info.model_type, *model.fixed_chunking())
    return ServedOnnxModel(model, tokenizer, FeatureConf(
        num_mel_bins=feats.num_mel_bins, frame_length=feats.frame_length,
        frame_shift=feats.frame_shift, dither=0.0, resample_rate=feats.sample_rate))
