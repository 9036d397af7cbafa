"""The optimizer named by the config's ``optim`` / ``optim_conf`` (WeNet 2.x keys)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def build_optimizer(params: Iterable, name: str, conf: Mapping[str, Any]) -> torch.optim.Optimizer:
    """Adam or AdamW over ``params`` with ``optim_conf`` (``lr``, ``weight_decay``, ``betas``...).

    An unknown name or a keyword the optimizer does not take is a ``ValueError`` that says which.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optim '{name}' (known: {', '.join(sorted(OPTIMIZERS))})")
    try:
        return OPTIMIZERS[name](params, **dict(conf))
    except TypeError as e:
        raise ValueError(f"bad optim_conf for '{name}': {e}") from None
