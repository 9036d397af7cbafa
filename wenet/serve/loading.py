"""The model a server streams with: loaded from a model directory and checked for streaming."""
from __future__ import annotations

import logging
from typing import Optional

from wenet.inference.loader import LoadedModel, load_model_dir
from wenet.inference.streaming import is_streaming_config
from wenet.models.factory import is_transducer_config


class NotServableError(ValueError):
    """A model the streaming server cannot serve, with the reason."""


def load_streaming_model(path: str, checkpoint: Optional[str] = None) -> LoadedModel:
    """A model directory's model, tokenizer and features (``load_model_dir``: ``final.zip``
    unless ``checkpoint`` is named), refused with NotServableError
    when the server could not stream it: transducer models, encoders trained without
    chunks (no ``use_dynamic_chunk`` / ``static_chunk_size``: chunk-by-chunk output would
    not be what the model learnt), features at a rate other than 16 kHz."""
    loaded = load_model_dir(path, device="cpu", checkpoint=checkpoint)
    configs = loaded.configs
    if is_transducer_config(configs):
        raise NotServableError(f"{path}: a transducer model; the server streams CTC + "
                               "attention models (U2/U2++)")
    if not is_streaming_config(configs):
        raise NotServableError(
            f"{path}: not a streaming model (encoder_conf has neither use_dynamic_chunk nor "
            "static_chunk_size > 0), so it cannot decode chunk by chunk; train one with "
            "conf/train_u2++_conformer.yaml, or use wenet/bin/recognize.py for this model")
    rate = loaded.feature_conf.resample_rate
    if rate not in (None, 16000):
        raise NotServableError(f"{path}: the model's features are at {rate} Hz; the server "
                               "takes 16 kHz audio only")
    logging.info("serving %s (%s)", path, "TorchScript" if loaded.scripted else "checkpoint")
    return loaded
