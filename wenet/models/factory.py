"""The model factory: a training config (the yaml plus input/output sizes) -> a model.

One registry per component kind (encoders, decoders, predictors, losses in
wenet/models/losses.py). A new encoder is a class in its own package and one entry in
``ENCODERS``; the component packages never import this module.
"""
from __future__ import annotations

import inspect
import logging
import re
from typing import Any, Dict, List, Optional, Tuple

import torch

from wenet.dataprep.cmvn import load_cmvn
from wenet.models.losses import LOSSES, loss_confs
from wenet.transducer.joint import TransducerJoint
from wenet.transducer.predictor import PREDICTORS
from wenet.transducer.transducer_model import TransducerModel
from wenet.transformer.asr_model import ASRModel
from wenet.transformer.cmvn import GlobalCMVN
from wenet.transformer.ctc import CTC
from wenet.transformer.decoder import BiTransformerDecoder, TransformerDecoder
from wenet.transformer.encoder import ConformerEncoder, TransformerEncoder
from wenet.transformer.losses import Loss
from wenet.zipformer.encoder import ZipformerEncoder

ENCODERS = {"conformer": ConformerEncoder, "transformer": TransformerEncoder,
            "zipformer": ZipformerEncoder}
DECODERS = {"transformer": TransformerDecoder, "bitransformer": BiTransformerDecoder}
# the kind a config gets when it names none
DEFAULT_ENCODER, DEFAULT_DECODER, DEFAULT_PREDICTOR = "conformer", "bitransformer", "stateless"
CMVN_MEAN_KEY, CMVN_ISTD_KEY = "encoder.global_cmvn.mean", "encoder.global_cmvn.istd"


def checked_kwargs(cls: type, conf: Optional[Dict[str, Any]], section: str) -> Dict[str, Any]:
    """``conf`` as keyword arguments of ``cls``; an unknown key is an error naming it."""
    conf = dict(conf or {})
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(conf) - accepted)
    if unknown:
        raise ValueError(f"{section}: unknown option(s) {unknown} for {cls.__name__}")
    return conf


# Options that shape only training (regularisation, its schedules, the chunk sizes drawn
# for streaming training): two models that differ only in these compute the same function
# in eval mode, so one may start from the other's weights.
_TRAINING_ONLY_OPTION = re.compile(
    r"dropout|^(schedule_scale|use_balancers|sparse_balancers|use_dynamic_chunk|"
    r"use_dynamic_left_chunk|static_chunk_size|chunk_size|left_context_frames)$")


def _component_options(configs: Dict[str, Any], kind_key: Optional[str], default_kind: str,
                       conf_key: str, registry: Dict[str, type]) -> Tuple[str, Dict[str, Any]]:
    """A component's kind and every option its class takes, the config's value where it
    gives one and the class's default elsewhere (an unknown kind: the config's own)."""
    kind = str(configs.get(kind_key, default_kind)) if kind_key else default_kind
    conf = dict(configs.get(conf_key) or {})
    cls = registry.get(kind)
    if cls is None:
        return kind, conf
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name != "self" and param.default is not inspect.Parameter.empty:
            conf.setdefault(name, param.default)
    return kind, conf


def _same_option(a: Any, b: Any) -> bool:
    """Equal option values, a tuple equal to the list it reads as in a yaml, and a scalar
    equal to a per-stack list that repeats it (``num_heads: 4`` and ``[4, 4, 4]``)."""
    a = list(a) if isinstance(a, tuple) else a
    b = list(b) if isinstance(b, tuple) else b
    if isinstance(a, list) != isinstance(b, list):
        scalar, seq = (b, a) if isinstance(a, list) else (a, b)
        return len(seq) > 0 and all(x == scalar for x in seq)
    return a == b


def architecture_differences(configs: Dict[str, Any], other: Dict[str, Any]) -> List[str]:
    """How the model ``configs`` builds computes another function than ``other``'s, one
    line per difference ('encoder_conf.frontend_activation: relu here, swoosh_r there'):
    the component kinds and their options, defaults resolved from the classes, options
    that shape only training (dropout, balancers, schedules, streaming chunk draws)
    ignored. Compared: the encoder always; the attention decoder, predictor and joint
    where both configs have one. Tensor shapes are not this function's business:
    ``wenet.train.checkpoint.load_init_weights`` reports those tensor by tensor."""
    components = [("encoder", DEFAULT_ENCODER, "encoder_conf", ENCODERS)]
    transducers = (is_transducer_config(configs), is_transducer_config(other))
    if all(transducers):
        components += [("predictor", DEFAULT_PREDICTOR, "predictor_conf", PREDICTORS),
                       (None, "joint", "joint_conf", {"joint": TransducerJoint})]
    if all("decoder" in c or "decoder_conf" in c or not t
           for c, t in ((configs, transducers[0]), (other, transducers[1]))):
        components.append(("decoder", DEFAULT_DECODER, "decoder_conf", DECODERS))
    lines = []
    for kind_key, default_kind, conf_key, registry in components:
        kind, ours = _component_options(configs, kind_key, default_kind, conf_key, registry)
        other_kind, theirs = _component_options(other, kind_key, default_kind, conf_key, registry)
        if kind != other_kind:
            lines.append(f"{kind_key}: {kind} here, {other_kind} there")
            continue
        for name in sorted(set(ours) | set(theirs)):
            if _TRAINING_ONLY_OPTION.search(name) or name == "global_cmvn":
                continue
            mine, yours = ours.get(name, "(not an option)"), theirs.get(name, "(not an option)")
            if not _same_option(mine, yours):
                lines.append(f"{conf_key}.{name}: {mine} here, {yours} there")
    return lines


def _pick(registry: Dict[str, type], name: str, what: str) -> type:
    if name not in registry:
        raise ValueError(f"unknown {what} '{name}' (one of {sorted(registry)})")
    return registry[name]


def is_transducer_config(configs: Dict[str, Any]) -> bool:
    """Whether a training config describes a transducer (``model: transducer`` or a
    ``predictor`` / ``joint_conf`` section)."""
    return (configs.get("model") == "transducer" or "predictor" in configs
            or "predictor_conf" in configs or "joint_conf" in configs)


def _global_cmvn(configs: Dict[str, Any], input_dim: int) -> Optional[GlobalCMVN]:
    cmvn_file = configs.get("cmvn_file")
    if cmvn_file is None:
        return None
    mean, istd = load_cmvn(cmvn_file)
    if mean.shape[0] != input_dim:
        raise ValueError(f"{cmvn_file}: CMVN dimension {mean.shape[0]} differs from "
                         f"input_dim {input_dim}")
    return GlobalCMVN(torch.from_numpy(mean).float(), torch.from_numpy(istd).float())


def _attention_decoder(configs: Dict[str, Any], vocab_size: int,
                       encoder_dim: int) -> torch.nn.Module:
    decoder_cls = _pick(DECODERS, configs.get("decoder", DEFAULT_DECODER), "decoder")
    return decoder_cls(vocab_size, encoder_dim, **checked_kwargs(
        decoder_cls, configs.get("decoder_conf"), "decoder_conf"))


def init_model(configs: Dict[str, Any], global_cmvn: Optional[GlobalCMVN] = None) -> ASRModel:
    """ASRModel for ``configs``: the training yaml (encoder, encoder_conf, decoder,
    decoder_conf, losses or model_conf) plus ``input_dim`` (feature size), ``output_dim``
    (vocabulary size, sos/eos last) and ``cmvn_file`` (global_cmvn path or None), read
    unless ``global_cmvn`` is given. A TransducerModel (a subclass) when
    ``is_transducer_config(configs)``.
    """
    for key in ("input_dim", "output_dim"):
        if key not in configs:
            raise ValueError(f"config lacks '{key}' (set it from the features / units.txt)")
    input_dim = int(configs["input_dim"])
    vocab_size = int(configs["output_dim"])
    transducer = is_transducer_config(configs)
    losses, model_kwargs = build_losses(configs, transducer)
    encoder_type = configs.get("encoder", DEFAULT_ENCODER)
    encoder_cls = _pick(ENCODERS, encoder_type, "encoder")
    encoder = encoder_cls(input_dim, global_cmvn=global_cmvn or _global_cmvn(configs, input_dim),
                          **checked_kwargs(encoder_cls, configs.get("encoder_conf"),
                                           "encoder_conf"))
    if transducer:
        return build_transducer(configs, encoder, vocab_size, losses, model_kwargs)
    decoder = _attention_decoder(configs, vocab_size, encoder.output_size())
    ctc = CTC(vocab_size, encoder.output_size())
    model = ASRModel(vocab_size, encoder, decoder, ctc, losses=losses, **model_kwargs)
    num_params = sum(p.numel() for p in model.parameters())
    logging.info("model: %s encoder, %s decoder, losses %s, %.2f M parameters",
                 encoder_type, configs.get("decoder", DEFAULT_DECODER), _describe(losses),
                 num_params / 1e6)
    return model


def build_losses(configs: Dict[str, Any], transducer: bool
                 ) -> Tuple[Dict[str, Loss], Dict[str, Any]]:
    """The losses a config names (``losses``, or the loss options of ``model_conf``; see
    wenet/models/losses.py), built from ``LOSSES``, and the model's own options."""
    confs, model_kwargs = loss_confs(configs, transducer)
    losses = {}
    for name, conf in confs.items():
        cls = _pick(LOSSES, name, "loss")
        losses[name] = cls(**checked_kwargs(cls, conf, f"losses.{name}"))
    return losses, model_kwargs


def _describe(losses: Dict[str, Loss]) -> str:
    return ", ".join(f"{name} {loss.weight:g}" for name, loss in losses.items()
                     if loss.active)


def _trains(losses: Dict[str, Loss], head: str) -> bool:
    """Whether a loss that is computed trains ``head``."""
    return any(loss.active and head in loss.heads for loss in losses.values())


def build_transducer(configs: Dict[str, Any], encoder: torch.nn.Module, vocab_size: int,
                     losses: Dict[str, Loss], model_kwargs: Dict[str, Any]
                     ) -> TransducerModel:
    """TransducerModel for ``configs`` around an already built ``encoder`` and its
    ``losses`` (see init_model); a CTC head or a decoder only where a loss trains it."""
    predictor_type = configs.get("predictor", DEFAULT_PREDICTOR)
    predictor_cls = _pick(PREDICTORS, predictor_type, "predictor")
    predictor = predictor_cls(vocab_size, **checked_kwargs(
        predictor_cls, configs.get("predictor_conf"), "predictor_conf"))
    num_outputs = vocab_size + len(model_kwargs.get("big_blank_durations") or ())
    joint = TransducerJoint(num_outputs, encoder.output_size(), predictor.output_size(),
                            **checked_kwargs(TransducerJoint, configs.get("joint_conf"),
                                             "joint_conf"))
    ctc = CTC(vocab_size, encoder.output_size()) if _trains(losses, "ctc") else None
    decoder = None
    if _trains(losses, "decoder"):
        decoder = _attention_decoder(configs, vocab_size, encoder.output_size())
    model = TransducerModel(vocab_size, encoder, predictor, joint, ctc=ctc, decoder=decoder,
                            losses=losses, **model_kwargs)
    logging.info("transducer: %s predictor, losses %s, %.2f M parameters", predictor_type,
                 _describe(losses), sum(p.numel() for p in model.parameters()) / 1e6)
    return model


def _checkpoint_cmvn(state: Dict[str, torch.Tensor], input_dim: int) -> Optional[GlobalCMVN]:
    """The CMVN a checkpoint carries as encoder buffers, or None when it has none."""
    mean, istd = state.get(CMVN_MEAN_KEY), state.get(CMVN_ISTD_KEY)
    if mean is None or istd is None:
        return None
    if mean.shape[0] != input_dim:
        raise ValueError(f"checkpoint CMVN dimension {mean.shape[0]} differs from "
                         f"input_dim {input_dim}")
    return GlobalCMVN(mean.clone(), istd.clone())


def model_from_checkpoint(configs: Dict[str, Any], checkpoint: Optional[str],
                          device: str | torch.device = "cpu",
                          config_name: str = "the config") -> ASRModel:
    """``init_model(configs)`` with ``checkpoint``'s weights (strict), in eval mode: the
    factory's step of loading (a model dir is loaded by ``wenet.inference.loader``).

    A checkpoint holds the model's CMVN (encoder buffers), so the model is built from it
    and ``configs['cmvn_file']`` is not read: no file elsewhere (a relative path resolved
    against another recipe, say) can stand in for the statistics the model was trained with.
    """
    if not checkpoint:
        logging.warning("no checkpoint given: the model is RANDOMLY INITIALISED")
        return init_model(configs).to(device).eval()
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    cmvn = _checkpoint_cmvn(state, int(configs["input_dim"])) if "input_dim" in configs else None
    if cmvn is None and configs.get("cmvn_file"):
        raise ValueError(f"{checkpoint}: no CMVN buffers ({CMVN_MEAN_KEY}) although the config "
                         f"names cmvn_file {configs['cmvn_file']}: not this config's checkpoint?")
    model = init_model(configs, global_cmvn=cmvn) if cmvn is not None \
        else init_model(dict(configs, cmvn_file=None))
    _load_fitting(model, state, checkpoint, configs, config_name)
    logging.info("loaded %s", checkpoint)
    return model.to(device).eval()


def _load_fitting(model: torch.nn.Module, state: Dict[str, torch.Tensor], checkpoint: str,
                  configs: Dict[str, Any], config_name: str) -> None:
    """``model.load_state_dict(state)`` (strict); a checkpoint that does not fit is one
    short ValueError (counts, the first mismatch, a section the config lacks), not torch's
    line per tensor."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and state[k].shape != own[k].shape]
    if not (missing or unexpected or shapes):
        model.load_state_dict(state)
        return
    parts = [f"{len(shapes)} tensors differ in shape" + (
        f" (first {shapes[0]}: {tuple(state[shapes[0]].shape)} there, "
        f"{tuple(own[shapes[0]].shape)} here)" if shapes else ""),
        f"{len(missing)} missing" + (f" (first {missing[0]})" if missing else ""),
        f"{len(unexpected)} unexpected" + (f" (first {unexpected[0]})" if unexpected else "")]
    absent = [k for k in ("encoder_conf", "decoder_conf") if k not in configs]
    hint = (f"; {config_name} has no {' or '.join(absent)}, so those parts were built with "
            "their defaults" if absent else "; is it the checkpoint of this config?")
    raise ValueError(f"{checkpoint} does not fit the model {config_name} describes: "
                     + ", ".join(parts) + hint)
