"""The model a server streams with: loaded from a model directory and checked for streaming."""
from __future__ import annotations

import logging
from typing import Optional

from wenet.inference.loader import LoadedModel, load_model_dir
from wenet.inference.stream_search import is_transducer_model
from wenet.inference.streaming import is_streaming_model


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
