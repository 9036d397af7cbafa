"""TorchScript export for the runtimes, and a dynamically int8-quantised copy for CPU serving.

The scripted model keeps the methods a streaming runtime calls, marked
``@torch.jit.export`` on the model: ``forward_encoder_chunk``,
``ctc_activation``, ``forward_attention_decoder``, ``subsampling_rate``,
``right_context``, ``sos_symbol``, ``eos_symbol``, ``is_bidirectional_decoder``, and
``is_streaming`` (whether the encoder was trained for chunks; the server asks it).
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterator, Optional

import torch

from wenet.utils.file_utils import atomic_open

# torch 2.14 marks every call this export makes as deprecated, though each works and
# none has a replacement that writes what WeNet runtimes load (a TorchScript zip run
# by libtorch). Exactly these messages are silenced, around these calls only:
# - torch.jit.script / torch.jit.save ("switch to torch.compile or torch.export"): an
#   ExportedProgram is not a TorchScript module; the runtimes would need an
#   AOTInductor/ExecuTorch loader first, and then torch.export replaces both.
# - torch.ao.quantization ("will be removed", yet present and working in 2.14) and
#   torch.quantize_per_tensor, which its dynamic int8 Linear uses for its packed
#   weights: the named successor, torchao's quantize_ with
#   Int8DynamicActivationInt8WeightConfig (or Int8WeightOnlyConfig), stores weights as
#   tensor subclasses that TorchScript cannot run (the scripted forward fails in the
#   interpreter) nor save (a saved and reloaded model computes garbage, relative error
#   ~1; checked with torchao 0.18). When torch removes quantize_dynamic,
#   quantize_model says so instead of failing deep inside; the int8 path then moves
#   to torchao together with the torch.export switch above.
_KNOWN_HARMLESS = (
    (FutureWarning, r"`torch\.jit\.script` is deprecated"),
    (FutureWarning, r"`torch\.jit\.save` is deprecated"),
    (DeprecationWarning, r"torch\.ao\.quantization is deprecated"),
    (UserWarning, r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other "
                  r"quantized tensor creation functions"),
)


@contextlib.contextmanager
def _known_deprecations_silenced() -> Iterator[None]:
    """Ignore exactly the deprecation warnings listed in _KNOWN_HARMLESS (and no other)."""
    with warnings.catch_warnings():
        for category, message in _KNOWN_HARMLESS:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def script_model(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """torch.jit.script of the model in eval mode (the runtime methods come with it)."""
    with _known_deprecations_silenced():
        return torch.jit.script(model.eval())


def quantize_model(model: torch.nn.Module) -> torch.nn.Module:
    """A copy with dynamic int8 quantisation of the Linear layers (weights int8,
    activations quantised on the fly); ``model`` itself is left as it is."""
    quantize_dynamic = getattr(torch.ao.quantization, "quantize_dynamic", None)
    if quantize_dynamic is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.ao.quantization."
                           "quantize_dynamic, which the int8 TorchScript export needs: "
                           "export without --output_quant_file")
    with _known_deprecations_silenced():
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def save_script(script: torch.jit.ScriptModule, path: str) -> None:
    """Write a TorchScript zip with atomic_open: a failed export leaves no half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_open(path, "wb") as f, _known_deprecations_silenced():
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
