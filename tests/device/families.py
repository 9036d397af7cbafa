"""Tiny configs of every model family and loss the toolkit trains, and a batch for them.

Each family is a ``tests.tiny_experiment.tiny_config`` (a conformer U2++ of width 32,
20 fbank bins, 8 units) with the changes that make it that family; dropout is on in a
few so that training-mode draws run under the guard too. ``FAMILIES`` together use
every entry of ``wenet.models.LOSSES`` (tests/device/test_forward_loss.py asserts it).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

from tests.tiny_experiment import TRANSDUCER, tiny_config
from tests.zipformer.test_encoder import TINY
from wenet.models import init_model

SMALL = {"encoder_conf": {"linear_units": 32, "num_blocks": 1},
         "decoder_conf": {"linear_units": 32}}
ZIPFORMER = {"encoder": "zipformer", "encoder_conf": {**TINY, "causal": False}}
NO_ENCODER_CONF = {"encoder_conf": None}  # a zipformer's options replace the conformer's
PRUNED = {"transducer": {"weight": 0.8, "transducer_loss": "pruned", "prune_range": 2,
                         "lm_scale": 0.25, "am_scale": 0.1, "simple_loss_scale": 0.5,
                         "prune_warmup_steps": 10}}
STATELESS = {"predictor": "stateless", "predictor_conf": {"embed_size": 8, "context_size": 2,
                                                          "hidden_size": None,
                                                          "output_size": None}}


def _transducer(losses: Dict[str, Any], *changes: Dict[str, Any]) -> Dict[str, Any]:
    """The conformer transducer of tiny_experiment (LSTM predictor, left-to-right decoder)
    with a ``losses`` section instead of its model_conf weights."""
    return tiny_config(TRANSDUCER, {"model_conf": {"attention_weight": None}}, *changes,
                       {"losses": losses})


FAMILIES: Dict[str, Dict[str, Any]] = {
    "conformer_u2pp": tiny_config(SMALL, {"encoder_conf": {"dropout_rate": 0.1}}),
    "conformer_u2pp_causal": tiny_config(SMALL, {"encoder_conf": {
        "causal": True, "use_dynamic_chunk": True, "use_dynamic_left_chunk": True}}),
    "transformer": tiny_config(SMALL, {"encoder": "transformer", "decoder": "transformer",
                                       "encoder_conf": {"cnn_module_kernel": None},
                                       "decoder_conf": {"r_num_blocks": None},
                                       "model_conf": {"reverse_weight": None}}),
    "conformer_cr_ctc": tiny_config(SMALL, {"model_conf": {"cr_ctc": True, "cr_loss_scale": 0.2,
                                                           "time_mask_ratio": 2.5}}),
    "zipformer": tiny_config(NO_ENCODER_CONF, ZIPFORMER),
    "zipformer_causal": tiny_config(NO_ENCODER_CONF, ZIPFORMER, {"encoder_conf": {"causal": True}}),
    "zipformer_pruned_cr_ctc": _transducer(
        {**PRUNED, "ctc": {"weight": 0.1}, "cr_ctc": {"weight": 0.1}},
        NO_ENCODER_CONF, ZIPFORMER, STATELESS, {"decoder": None, "decoder_conf": None}),
    "transducer_full": _transducer({"transducer": {"weight": 0.7}, "ctc": {"weight": 0.1},
                                    "attention": {"weight": 0.2}}),
    "transducer_torchaudio": _transducer({"transducer": {"rnnt_loss_impl": "torchaudio"}}),
    "transducer_fastemit_stateless": _transducer(
        {"transducer": {"fastemit_lambda": 0.01}}, STATELESS),
    "transducer_pruned": _transducer({**PRUNED, "attention": {"weight": 0.2}}),
    "transducer_multi_blank": _transducer(
        {"transducer": {"weight": 1.0}, "ctc": {"weight": 0.1}},
        {"model_conf": {"big_blank_durations": [2, 3]}}),
}


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """Family ``name``'s model, its weights drawn from ``seed``."""
    torch.manual_seed(seed)
    return init_model(FAMILIES[name])


def batch(seed: int = 1) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(feats (3, 72, 20), their lengths, targets padded with -1, target lengths)."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(3, 72, 20, generator=g)
    text = torch.tensor([[3, 4, 5, 6], [6, 3, -1, -1], [2, 5, 4, -1]])
    return feats, torch.tensor([72, 55, 40]), text, torch.tensor([4, 2, 3])
