"""The model a server streams with: loaded from a model directory and checked for streaming."""
from __future__ import annotations

import glob
import logging
import os
from types import SimpleNamespace
from typing import Any, Optional

import torch

from wenet.dataset.fbank import FeatureConf
from wenet.dataset.tokenizer import Tokenizer
from wenet.decode.streaming import is_streaming_config
from wenet.models.factory import is_transducer_config, load_model
from wenet.utils.file_utils import load_yaml, read_symbol_table


class NotServableError(ValueError):
    """A model the streaming server cannot serve, with the reason."""


def _load_dir(path: str, checkpoint: Optional[str]) -> Any:
    """``load_model_dir`` when the decode room has it; until then the same fields from
    ``train.yaml`` + units.txt (+ a BPE model) and ``final.zip`` or ``checkpoint``."""
    try:
        from wenet.decode.model_dir import load_model_dir
    except ImportError:
        load_model_dir = None
    if load_model_dir is not None:
        return load_model_dir(path, device="cpu", checkpoint=checkpoint)
    configs = load_yaml(os.path.join(path, "train.yaml"))
    bpe = sorted(glob.glob(os.path.join(path, "*.model")))
    tokenizer = Tokenizer(read_symbol_table(os.path.join(path, "units.txt")),
                          bpe[0] if bpe else None)
    zip_path = os.path.join(path, "final.zip")
    if checkpoint is None and os.path.exists(zip_path):
        model, scripted = torch.jit.load(zip_path, map_location="cpu").eval(), True
    elif checkpoint is not None:
        model, scripted = load_model(configs, checkpoint, "cpu"), False
    else:
        raise NotServableError(f"{path} has no final.zip; give --checkpoint")
    conf = FeatureConf.from_config(configs, os.path.join(path, "train.yaml"))
    return SimpleNamespace(model=model, tokenizer=tokenizer, feature_conf=conf,
                           configs=configs, scripted=scripted)


def load_streaming_model(path: str, checkpoint: Optional[str] = None) -> Any:
    """A model directory's model, tokenizer and features, refused with NotServableError
    when the server could not stream it: transducer models, encoders trained without
    chunks (no ``use_dynamic_chunk`` / ``static_chunk_size``: chunk-by-chunk output would
    not be what the model learnt), features at a rate other than 16 kHz."""
    loaded = _load_dir(path, checkpoint)
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
