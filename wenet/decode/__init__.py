"""Decoding: the searches (ctc, attention, transducer), the registry of modes and the one
entry point ``decode(model, encoder_out, encoder_mask, modes, options)``.

The names below are imported on first use (PEP 562), so the pure-Python parts of this
room (``context_graph``, ``ctc_lm``, ``hyps``) load without torch: the ONNX runtime
(``wenet.runtime``) reuses them in a process that has no torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"BatchContext": "batch_context", "ModeResult": "batch_context",
            "DecodeOptions": "options", "MODES": "modes", "DecodeMode": "modes",
            "check_modes": "modes", "decode": "modes", "register_mode": "modes"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
