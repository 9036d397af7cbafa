"""Build an ASRModel from a training configuration (the yaml plus input/output sizes)."""
from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, Optional

import torch

from wenet.transformer.asr_model import ASRModel
from wenet.transformer.cmvn import GlobalCMVN
from wenet.transformer.ctc import CTC
from wenet.transformer.decoder import BiTransformerDecoder, TransformerDecoder
from wenet.transformer.encoder import ConformerEncoder, TransformerEncoder
from wenet.utils.cmvn import load_cmvn
from wenet.transducer.transducer_model import build_transducer, is_transducer_config

ENCODERS = {"conformer": ConformerEncoder, "transformer": TransformerEncoder}
DECODERS = {"transformer": TransformerDecoder, "bitransformer": BiTransformerDecoder}


def _checked_kwargs(cls: type, conf: Optional[Dict[str, Any]], section: str) -> Dict[str, Any]:
    """``conf`` as keyword arguments of ``cls``; an unknown key is an error naming it."""
    conf = dict(conf or {})
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(conf) - accepted)
    if unknown:
        raise ValueError(f"{section}: unknown option(s) {unknown} for {cls.__name__}")
    return conf


def init_model(configs: Dict[str, Any]) -> ASRModel:
    """ASRModel for ``configs``: the training yaml (encoder, encoder_conf, decoder,
    decoder_conf, model_conf) plus ``input_dim`` (feature size), ``output_dim``
    (vocabulary size, sos/eos last) and ``cmvn_file`` (global_cmvn path or None).
    A TransducerModel (a subclass) when the config has ``model: transducer`` or a
    predictor/joint section (wenet/transducer/transducer_model.py).
    """
    for key in ("input_dim", "output_dim"):
        if key not in configs:
            raise ValueError(f"config lacks '{key}' (set it from the features / units.txt)")
    input_dim = int(configs["input_dim"])
    vocab_size = int(configs["output_dim"])

    global_cmvn = None
    cmvn_file = configs.get("cmvn_file")
    if cmvn_file is not None:
        mean, istd = load_cmvn(cmvn_file)
        if mean.shape[0] != input_dim:
            raise ValueError(f"{cmvn_file}: CMVN dimension {mean.shape[0]} differs from "
                             f"input_dim {input_dim}")
        global_cmvn = GlobalCMVN(torch.from_numpy(mean).float(), torch.from_numpy(istd).float())

    encoder_type = configs.get("encoder", "conformer")
    decoder_type = configs.get("decoder", "bitransformer")
    if encoder_type not in ENCODERS:
        raise ValueError(f"unknown encoder '{encoder_type}' (one of {sorted(ENCODERS)})")
    if decoder_type not in DECODERS:
        raise ValueError(f"unknown decoder '{decoder_type}' (one of {sorted(DECODERS)})")
    encoder_cls = ENCODERS[encoder_type]
    decoder_cls = DECODERS[decoder_type]

    encoder = encoder_cls(input_dim, global_cmvn=global_cmvn,
                          **_checked_kwargs(encoder_cls, configs.get("encoder_conf"),
                                            "encoder_conf"))
    if is_transducer_config(configs):
        return build_transducer(configs, encoder, vocab_size)
    decoder = decoder_cls(vocab_size, encoder.output_size(),
                          **_checked_kwargs(decoder_cls, configs.get("decoder_conf"),
                                            "decoder_conf"))
    ctc = CTC(vocab_size, encoder.output_size())
    model = ASRModel(vocab_size=vocab_size, encoder=encoder, decoder=decoder, ctc=ctc,
                     **_checked_kwargs(ASRModel, configs.get("model_conf"), "model_conf"))
    num_params = sum(p.numel() for p in model.parameters())
    logging.info("model: %s encoder, %s decoder, %.2f M parameters",
                 encoder_type, decoder_type, num_params / 1e6)
    return model


def load_trained_model(config_path: str, checkpoint: Optional[str],
                       device: str = "cpu") -> ASRModel:
    """The model described by an experiment's ``train.yaml`` with ``checkpoint``'s
    weights (strict), in eval mode: what recognition and export start from."""
    import yaml  # local: only inference entry points need it here

    with open(config_path, "r", encoding="utf-8") as f:
        configs = yaml.safe_load(f)
    model = init_model(configs)
    if checkpoint:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        logging.info("loaded %s", checkpoint)
    else:
        logging.warning("no checkpoint given: the model is RANDOMLY INITIALISED")
    return model.to(device).eval()
