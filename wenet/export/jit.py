"""TorchScript export for the runtimes, and a dynamically int8-quantised copy for CPU serving.

The scripted model keeps the methods a streaming runtime calls, marked
``@torch.jit.export`` on the model: ``forward_encoder_chunk``,
``ctc_activation``, ``forward_attention_decoder``, ``subsampling_rate``,
``right_context``, ``sos_symbol``, ``eos_symbol``, ``is_bidirectional_decoder``.
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from wenet.utils.file_utils import atomic_open


def script_model(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """torch.jit.script of the model in eval mode (the runtime methods come with it)."""
    return torch.jit.script(model.eval())


def quantize_model(model: torch.nn.Module) -> torch.nn.Module:
    """A copy with dynamic int8 quantisation of the Linear layers (weights int8,
    activations quantised on the fly); ``model`` itself is left as it is."""
    return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def save_script(script: torch.jit.ScriptModule, path: str) -> None:
    """Write a TorchScript zip with atomic_open: a failed export leaves no half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_open(path, "wb") as f:
        torch.jit.save(script, f)


def export_jit(model: torch.nn.Module, output_file: str,
               output_quant_file: Optional[str] = None) -> None:
    """Script ``model`` to ``output_file``; when ``output_quant_file`` is given, also its
    int8 copy there."""
    num_params = sum(p.numel() for p in model.parameters())
    save_script(script_model(model), output_file)
    logging.info("exported %s (%.2f M parameters)", output_file, num_params / 1e6)
    if output_quant_file:
        save_script(script_model(quantize_model(model)), output_quant_file)
        logging.info("exported int8 model %s", output_quant_file)
