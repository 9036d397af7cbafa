"""A model config read from a file (a model dir's ``train.yaml``) checked before a model is
built from it, so that a wrong key is one error naming the file and the key (issue 57),
not an ``int()`` message, a negative tensor size or hundreds of size mismatches later.

It checks what building a model reads at the top level: ``input_dim`` and
``output_dim`` (positive integers), the component kinds (``encoder``, ``decoder``,
``predictor``: one of the registry's) and their option sections (``*_conf``: mappings or
null). The options inside a section are checked by the factory (``checked_kwargs``).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

from wenet.models.factory import DECODERS, ENCODERS
from wenet.transducer.predictor import PREDICTORS

_DIMS = {"input_dim": "the feature dimension", "output_dim": "the number of units"}
_KINDS = {"encoder": ENCODERS, "decoder": DECODERS, "predictor": PREDICTORS}
_SECTIONS = ("encoder_conf", "decoder_conf", "predictor_conf", "joint_conf", "model_conf",
             "dataset_conf")


def check_model_config(configs: Any, path: str) -> Dict[str, Any]:
    """``configs`` (read from ``path``) when it can build a model; ValueError naming
    ``path`` and the key otherwise."""
    if not isinstance(configs, Mapping):
        raise ValueError(f"{path}: expected a mapping of config keys, got "
                         f"{type(configs).__name__}")
    for key, meaning in _DIMS.items():
        value = configs.get(key)
        if value is None:
            raise ValueError(f"{path}: {key} is missing ({meaning})")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{path}: {key} must be a positive integer ({meaning}), "
                             f"got {value!r}")
    for key, registry in _KINDS.items():
        if key in configs and configs[key] not in registry:
            raise ValueError(f"{path}: {key} must be one of {sorted(registry)}, got "
                             f"{configs[key]!r}")
    for key in _SECTIONS:
        value = configs.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"{path}: {key} must be a mapping of options, got {value!r}")
    return dict(configs)
