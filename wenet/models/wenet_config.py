"""A WeNet ``train.yaml`` (2.x or 3.x keys) → this toolkit's model config, or a refusal.

Our Transformer / Conformer encoders, attention decoders and CTC head compute what WeNet's
do for the options accepted here (tests/models/test_wenet_import.py checks that against
outputs of WeNet's own code). Everything else a WeNet config can ask for is refused with
:class:`UnsupportedWenetConfig`, which names the key and its value: a model is imported
whole or not at all.

Accepted, per section (anything not listed is refused by name):

- ``model``: ``asr_model`` (or absent); ``encoder``: ``conformer`` | ``transformer``;
  ``decoder``: ``transformer`` | ``bitransformer``; ``ctc``: ``ctc`` with blank id 0;
  ``cmvn``: ``global_cmvn`` or none; ``tokenizer``: ``char`` | ``bpe``.
- ``encoder_conf``: sizes and dropouts, ``input_layer`` linear | conv2d | conv2d6 | conv2d8,
  ``pos_enc_layer_type`` abs_pos | rel_pos with the matching ``selfattention_layer_type``
  (selfattn | rel_selfattn; a Transformer encoder only abs_pos, as WeNet's Transformer
  encoder always uses plain attention), ``normalize_before``, chunk options, and for the
  Conformer ``macaron_style``, ``use_cnn_module``, ``cnn_module_kernel``, ``causal``,
  ``cnn_module_norm`` batch_norm | layer_norm, ``activation_type``. WeNet 3.x's further
  options are accepted at their defaults only (biases on, layer_norm with eps 1e-5, plain
  position-wise feed-forward, no grouped heads, ``conv_inner_factor`` 2, ``final_norm``);
  ``use_sdpa`` and ``gradient_checkpointing`` change nothing computed and are dropped.
- ``decoder_conf``: sizes and dropouts, ``r_num_blocks``, ``normalize_before``,
  ``input_layer: embed``, ``use_output_layer: true``, ReLU, the 3.x options at defaults.
- ``model_conf``: ``ctc_weight``, ``reverse_weight``, ``lsm_weight``,
  ``length_normalized_loss``; ``apply_non_blank_embedding: false``.
- ``dataset_conf``: ``feats_type: fbank``, ``fbank_conf`` (``window_type: povey``),
  ``resample_conf``; the training-time data options (filters, SpecAugment, batching...)
  are WeNet's and are not carried over.
- training loop: ``grad_clip``, ``accum_grad``, ``max_epoch``, ``log_interval``, an
  ``adam`` / ``adamw`` optimizer and a ``warmuplr`` schedule are carried over for
  fine-tuning; other optimizers and schedules are left out with a warning (never refused:
  they do not change the model).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Tuple

ENCODER_TYPES = ("conformer", "transformer")
DECODER_TYPES = ("transformer", "bitransformer")
INPUT_LAYERS = ("linear", "conv2d", "conv2d6", "conv2d8")
ACTIVATIONS = ("relu", "swish", "gelu", "tanh", "selu", "hardtanh")

# options copied as they are
_ENCODER_COPY = ("output_size", "attention_heads", "linear_units", "num_blocks",
                 "dropout_rate", "positional_dropout_rate", "attention_dropout_rate",
                 "normalize_before", "static_chunk_size", "use_dynamic_chunk",
                 "use_dynamic_left_chunk")
_CONFORMER_COPY = ("macaron_style", "use_cnn_module", "cnn_module_kernel", "causal")
_DECODER_COPY = ("attention_heads", "linear_units", "num_blocks", "dropout_rate",
                 "positional_dropout_rate", "self_attention_dropout_rate",
                 "src_attention_dropout_rate", "normalize_before")
# WeNet 3.x options we support only at their default value
_SHARED_DEFAULTS: Dict[str, Any] = {
    "query_bias": True, "key_bias": True, "value_bias": True, "layer_norm_type": "layer_norm",
    "norm_eps": 1e-5, "n_kv_head": None, "head_dim": None,
    "mlp_type": "position_wise_feed_forward", "mlp_bias": True}
_ENCODER_DEFAULTS = dict(_SHARED_DEFAULTS, conv_bias=True, conv_norm_eps=1e-5,
                         conv_inner_factor=2, final_norm=True)
_DECODER_DEFAULTS = dict(_SHARED_DEFAULTS, input_layer="embed", use_output_layer=True,
                         src_attention=True, activation_type="relu",
                         tie_word_embedding=False, src_query_bias=True, src_key_bias=True,
                         src_value_bias=True)
# options that change how WeNet computes or trains, not what: dropped
_DROPPED = ("use_sdpa", "gradient_checkpointing", "n_expert", "n_expert_activated",
            "positionwise_conv_kernel_size")  # the last one is unused by WeNet's conformer
_MODEL_CONF_COPY = ("ctc_weight", "reverse_weight", "lsm_weight", "length_normalized_loss")
_FBANK_KEYS = ("num_mel_bins", "frame_length", "frame_shift", "dither")
# training-loop keys carried over for fine-tuning, where ours means the same
_TRAINING_KEYS = ("grad_clip", "accum_grad", "max_epoch", "log_interval")
_OPTIMIZERS = ("adam", "adamw")  # torch's, with torch's keyword arguments in optim_conf
_SCHEDULERS = {"warmuplr": ("warmup_steps",)}


class UnsupportedWenetConfig(ValueError):
    """A WeNet config asks for something this toolkit does not compute the same way."""


def _refuse(key: str, value: Any, why: str) -> UnsupportedWenetConfig:
    return UnsupportedWenetConfig(f"{key}: {value!r} is not supported ({why}); "
                                  "the model was not imported")


def _at_default(section: str, conf: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    for key, default in defaults.items():
        if key in conf and conf[key] != default:
            raise _refuse(f"{section}.{key}", conf[key], f"only {default!r} is")


def _check_known(section: str, conf: Mapping[str, Any], known: Tuple[str, ...]) -> None:
    for key in conf:
        if key not in known:
            raise _refuse(f"{section}.{key}", conf[key], "an option this importer does not know")


def _attention_kind(encoder: str, conf: Mapping[str, Any]) -> str:
    """The positional encoding, checked against the attention WeNet would build with it."""
    default_pos = "rel_pos" if encoder == "conformer" else "abs_pos"
    pos = conf.get("pos_enc_layer_type", default_pos)
    if pos not in ("abs_pos", "rel_pos"):
        raise _refuse("encoder_conf.pos_enc_layer_type", pos, "abs_pos and rel_pos are")
    if encoder == "transformer":
        if pos != "abs_pos":
            raise _refuse("encoder_conf.pos_enc_layer_type", pos,
                          "WeNet's transformer encoder keeps plain attention with it; ours "
                          "would use relative-position attention")
        attn = conf.get("selfattention_layer_type", "selfattn")
        if attn != "selfattn":
            raise _refuse("encoder_conf.selfattention_layer_type", attn,
                          "a transformer encoder imports with selfattn only")
        return pos
    attn = conf.get("selfattention_layer_type", "rel_selfattn")
    wanted = "rel_selfattn" if pos == "rel_pos" else "selfattn"
    if attn != wanted:
        raise _refuse("encoder_conf.selfattention_layer_type", attn,
                      f"with pos_enc_layer_type {pos} our conformer uses {wanted}")
    return pos


def _encoder(configs: Mapping[str, Any]) -> Tuple[str, Dict[str, Any]]:
    kind = configs.get("encoder", "conformer")
    if kind not in ENCODER_TYPES:
        raise _refuse("encoder", kind, f"encoders: {', '.join(ENCODER_TYPES)}")
    conf = dict(configs.get("encoder_conf") or {})
    if "efficient_conf" in conf:
        raise _refuse("encoder_conf.efficient_conf", conf["efficient_conf"],
                      "that is the efficient conformer")
    out: Dict[str, Any] = {k: conf[k] for k in _ENCODER_COPY if k in conf}
    layer = conf.get("input_layer", "conv2d")
    if layer not in INPUT_LAYERS:
        raise _refuse("encoder_conf.input_layer", layer, f"front ends: {', '.join(INPUT_LAYERS)}")
    out["input_layer"] = layer
    out["pos_enc_layer_type"] = _attention_kind(kind, conf)
    known = _ENCODER_COPY + tuple(_ENCODER_DEFAULTS) + _DROPPED + (
        "input_layer", "pos_enc_layer_type", "selfattention_layer_type", "activation_type")
    activation = conf.get("activation_type", "swish" if kind == "conformer" else "relu")
    if activation not in ACTIVATIONS:
        raise _refuse("encoder_conf.activation_type", activation,
                      f"activations: {', '.join(ACTIVATIONS)}")
    out["activation_type"] = activation
    if kind == "conformer":
        known += _CONFORMER_COPY + ("cnn_module_norm",)
        out.update({k: conf[k] for k in _CONFORMER_COPY if k in conf})
        norm = conf.get("cnn_module_norm", "batch_norm")
        if norm not in ("batch_norm", "layer_norm"):
            raise _refuse("encoder_conf.cnn_module_norm", norm, "batch_norm and layer_norm are")
        out["cnn_module_norm"] = norm
    _check_known("encoder_conf", conf, known)
    _at_default("encoder_conf", conf, _ENCODER_DEFAULTS)
    return kind, out


def _decoder(configs: Mapping[str, Any]) -> Tuple[str, Dict[str, Any]]:
    kind = configs.get("decoder", "bitransformer")
    if kind not in DECODER_TYPES:
        raise _refuse("decoder", kind, f"decoders: {', '.join(DECODER_TYPES)}")
    conf = dict(configs.get("decoder_conf") or {})
    copy = _DECODER_COPY + (("r_num_blocks",) if kind == "bitransformer" else ())
    _check_known("decoder_conf", conf, copy + tuple(_DECODER_DEFAULTS) + _DROPPED)
    _at_default("decoder_conf", conf, _DECODER_DEFAULTS)
    return kind, {k: conf[k] for k in copy if k in conf}


def _model_conf(configs: Mapping[str, Any]) -> Dict[str, Any]:
    model = configs.get("model", "asr_model")
    if model != "asr_model":
        raise _refuse("model", model, "only asr_model (CTC + attention decoder) is")
    ctc = configs.get("ctc", "ctc")
    if ctc != "ctc":
        raise _refuse("ctc", ctc, "only ctc is")
    blank = (configs.get("ctc_conf") or {}).get("ctc_blank_id", 0)
    if blank != 0:
        raise _refuse("ctc_conf.ctc_blank_id", blank, "blank must be id 0")
    conf = dict(configs.get("model_conf") or {})
    if conf.get("apply_non_blank_embedding", False):
        raise _refuse("model_conf.apply_non_blank_embedding", True, "only false is")
    _check_known("model_conf", conf, _MODEL_CONF_COPY + ("apply_non_blank_embedding",
                                                         "special_tokens"))
    return {k: conf[k] for k in _MODEL_CONF_COPY if k in conf}


def _dataset_conf(configs: Mapping[str, Any]) -> Dict[str, Any]:
    conf = configs.get("dataset_conf") or {}
    feats = conf.get("feats_type", "fbank")
    if feats != "fbank":
        raise _refuse("dataset_conf.feats_type", feats, "only fbank is")
    fbank = dict(conf.get("fbank_conf") or {})
    window = fbank.pop("window_type", "povey")
    if window != "povey":
        raise _refuse("dataset_conf.fbank_conf.window_type", window, "only povey is")
    _check_known("dataset_conf.fbank_conf", fbank, _FBANK_KEYS)
    out: Dict[str, Any] = {"fbank_conf": {k: fbank[k] for k in _FBANK_KEYS if k in fbank}}
    rate = (conf.get("resample_conf") or {}).get("resample_rate")
    if rate:
        out["resample_conf"] = {"resample_rate": int(rate)}
    return out


def _training(configs: Mapping[str, Any]) -> Dict[str, Any]:
    """The training-loop keys of the WeNet config that mean the same here (the recipe's
    optimizer and schedule, to fine-tune from); others are logged and left out (our
    defaults apply). Training options never block an import."""
    out = {k: configs[k] for k in _TRAINING_KEYS if k in configs}
    optim = configs.get("optim")
    if optim in _OPTIMIZERS:
        out.update(optim=optim, optim_conf=dict(configs.get("optim_conf") or {}))
    elif optim is not None:
        logging.warning("optim %r is not carried over (ours: %s)", optim, ", ".join(_OPTIMIZERS))
    scheduler = configs.get("scheduler")
    conf = dict(configs.get("scheduler_conf") or {})
    if scheduler in _SCHEDULERS and set(conf) <= set(_SCHEDULERS[scheduler]):
        out.update(scheduler=scheduler, scheduler_conf=conf)
    elif scheduler is not None:
        logging.warning("scheduler %r %s is not carried over", scheduler, conf)
    return out


def cmvn_source(configs: Mapping[str, Any]) -> Optional[Tuple[str, bool]]:
    """(the CMVN file the config names, whether it is JSON) or None for a model without
    global CMVN: 3.x's ``cmvn: global_cmvn`` + ``cmvn_conf``, or 2.x's top-level
    ``cmvn_file`` + ``is_json_cmvn``."""
    if "cmvn" in configs or "cmvn_conf" in configs:
        kind = configs.get("cmvn")
        if kind is None:
            return None
        if kind != "global_cmvn":
            raise _refuse("cmvn", kind, "only global_cmvn is")
        conf = configs.get("cmvn_conf") or {}
        return str(conf.get("cmvn_file") or ""), bool(conf.get("is_json_cmvn", True))
    if configs.get("cmvn_file"):
        return str(configs["cmvn_file"]), bool(configs.get("is_json_cmvn", True))
    return None


def tokenizer_paths(configs: Mapping[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """(units file, BPE model) as the config names them (3.x ``tokenizer_conf``; 2.x
    names neither), refusing a tokenizer ours cannot reproduce."""
    kind = configs.get("tokenizer", "char")
    if kind not in ("char", "bpe"):
        raise _refuse("tokenizer", kind, "char and bpe are")
    conf = configs.get("tokenizer_conf") or {}
    for key, ok in (("split_with_space", False), ("non_lang_syms_path", None),
                    ("is_multilingual", False), ("connect_symbol", "")):
        if conf.get(key, ok) != ok:
            raise _refuse(f"tokenizer_conf.{key}", conf[key], f"only {ok!r} is")
    units = conf.get("symbol_table_path")
    bpe = conf.get("bpe_path") if kind == "bpe" else None
    return units, bpe


def special_sos_eos(configs: Mapping[str, Any]) -> Optional[int]:
    """The sos/eos id ``tokenizer_conf.special_tokens`` names (3.x), None when it names
    none (then ``<sos/eos>`` in the units decides); sos and eos must be one id."""
    special = ((configs.get("tokenizer_conf") or {}).get("special_tokens")
               or (configs.get("model_conf") or {}).get("special_tokens") or {})
    sos, eos = special.get("<sos>"), special.get("<eos>")
    if sos != eos:
        raise _refuse("tokenizer_conf.special_tokens", special, "<sos> and <eos> must be one id")
    blank = special.get("<blank>", 0)
    if blank != 0:
        raise _refuse("tokenizer_conf.special_tokens.<blank>", blank, "blank must be id 0")
    return None if sos is None else int(sos)


def map_config(configs: Mapping[str, Any]) -> Dict[str, Any]:
    """Our model config (encoder, decoder, their confs, model_conf, dataset_conf,
    input_dim, output_dim) for a WeNet ``train.yaml``; UnsupportedWenetConfig naming the
    first key we cannot honour."""
    for key in ("input_dim", "output_dim"):
        if key not in configs:
            raise UnsupportedWenetConfig(f"the WeNet train.yaml lacks '{key}' (WeNet's "
                                         "train.py writes it): is this an exp dir's train.yaml?")
    encoder, encoder_conf = _encoder(configs)
    decoder, decoder_conf = _decoder(configs)
    out = {"encoder": encoder, "encoder_conf": encoder_conf,
           "decoder": decoder, "decoder_conf": decoder_conf,
           "model_conf": _model_conf(configs), "dataset_conf": _dataset_conf(configs),
           "input_dim": int(configs["input_dim"]), "output_dim": int(configs["output_dim"]),
           **_training(configs)}
    cmvn_source(configs)
    tokenizer_paths(configs)
    special_sos_eos(configs)
    logging.info("WeNet config mapped: %s encoder, %s decoder", encoder, decoder)
    return out
