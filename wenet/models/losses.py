"""The registry of training losses and how a config names them.

A config names its losses in a ``losses`` section, by registry name, each with its
``weight`` (default 1) and options, summed in the order given::

    losses:
      ctc: {weight: 0.3}
      attention: {weight: 0.7, lsm_weight: 0.1, reverse_weight: 0.3}

``model_conf`` then holds only options of the model itself (``ignore_id``, a
transducer's ``big_blank_durations``). A config without ``losses`` (every config
written before the registry) keeps its loss options in ``model_conf`` as before;
:func:`loss_confs` translates them (see ``_legacy_asr`` and ``_legacy_transducer``).
A new loss is a :class:`~wenet.transformer.losses.Loss` subclass in its own module
and one entry in ``LOSSES``.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from wenet.transducer.losses import TransducerLoss
from wenet.transformer.losses import AttentionLoss, CRCTCLoss, CTCLoss

LOSSES = {"ctc": CTCLoss, "attention": AttentionLoss, "cr_ctc": CRCTCLoss,
          "transducer": TransducerLoss}

# options of the models themselves, as opposed to options of their losses
MODEL_KEYS = {False: ("ignore_id",), True: ("ignore_id", "big_blank_durations")}
# model_conf keys of the configs before the registry: the loss whose option each is,
# as "loss" (an option of the same name) or "loss.option" (the weights are translated by
# _legacy_asr / _legacy_transducer)
_LEGACY_OPTIONS = {
    False: {"lsm_weight": "attention", "length_normalized_loss": "attention",
            "reverse_weight": "attention", "time_mask_ratio": "cr_ctc",
            "ctc_prior_weight": "ctc.prior_weight"},
    True: {"ctc_prior_weight": "ctc.prior_weight",
           "lsm_weight": "attention", "length_normalized_loss": "attention",
           "reverse_weight": "attention", "rnnt_loss_impl": "transducer",
           "fastemit_lambda": "transducer", "rnnt_clamp": "transducer",
           "transducer_loss": "transducer", "prune_range": "transducer",
           "lm_scale": "transducer", "am_scale": "transducer",
           "simple_loss_scale": "transducer", "prune_warmup_steps": "transducer"},
}
_LEGACY_WEIGHTS = {False: ("ctc_weight", "cr_ctc", "cr_loss_scale"),
                   True: ("transducer_weight", "ctc_weight", "attention_weight")}


def loss_confs(configs: Dict[str, Any], transducer: bool
               ) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, Any]]:
    """(the options of each loss by name, in summing order; the model's own options)
    of a training config; an unknown ``model_conf`` key is an error naming it."""
    model_conf = dict(configs.get("model_conf") or {})
    model_kwargs = {k: model_conf.pop(k) for k in MODEL_KEYS[transducer] if k in model_conf}
    kind = "TransducerModel" if transducer else "ASRModel"
    legacy = set(_LEGACY_OPTIONS[transducer]) | set(_LEGACY_WEIGHTS[transducer])
    unknown = sorted(set(model_conf) - legacy)
    if unknown:
        raise ValueError(f"model_conf: unknown option(s) {unknown} for {kind}")
    if configs.get("losses") is not None:
        if model_conf:
            raise ValueError(f"model_conf: {sorted(model_conf)} are loss options: with a "
                             "losses section, give them there (e.g. losses.ctc.weight)")
        losses = configs["losses"]
        if not isinstance(losses, dict) or not losses:
            raise ValueError(f"losses: a mapping of loss names to options, got {losses!r}")
        return {name: dict(conf or {}) for name, conf in losses.items()}, model_kwargs
    translate = _legacy_transducer if transducer else _legacy_asr
    losses = translate(model_conf)
    for key, target in _LEGACY_OPTIONS[transducer].items():
        name, _, option = target.partition(".")
        if key in model_conf and name in losses:
            losses[name][option or key] = model_conf[key]
    return losses, model_kwargs


def _legacy_asr(model_conf: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """``ctc_weight`` w (0.5): attention of weight 1 - w, then ctc of weight w; with
    ``cr_ctc`` true, cr_ctc of weight ``cr_loss_scale`` (0.2)."""
    ctc_weight = model_conf.get("ctc_weight", 0.5)
    if not 0.0 <= ctc_weight <= 1.0:
        raise ValueError(f"ctc_weight must be in [0, 1], got {ctc_weight}")
    losses: Dict[str, Dict[str, Any]] = {"attention": {"weight": 1 - ctc_weight},
                                         "ctc": {"weight": ctc_weight}}
    if model_conf.get("cr_ctc", False):
        losses["cr_ctc"] = {"weight": float(model_conf.get("cr_loss_scale", 0.2))}
    return losses


def _legacy_transducer(model_conf: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """transducer of weight ``transducer_weight`` (1), ctc of ``ctc_weight`` (0) and
    attention of ``attention_weight`` (0), in that order."""
    return {"transducer": {"weight": model_conf.get("transducer_weight", 1.0)},
            "ctc": {"weight": model_conf.get("ctc_weight", 0.0)},
            "attention": {"weight": model_conf.get("attention_weight", 0.0)}}
