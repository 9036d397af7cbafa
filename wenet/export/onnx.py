"""ONNX export of a trained model for CPU runtimes: the model directory of
docs/onnx_format.md, for every model family the toolkit trains.

=====================  ==========================================  =======================
file                   what                                        module
=====================  ==========================================  =======================
encoder.onnx           full-context batched encoder (CMVN inside)  onnx_offline
encoder_chunk.onnx     streaming step, fixed-size caches           onnx_streaming
                       (streaming models only)
ctc.onnx               CTC log-probabilities (models with CTC)     onnx_offline
decoder.onnx           rescoring decoder (models with a decoder)   onnx_offline
encoder_proj.onnx,     the transducer's joint projections,         onnx_transducer
predictor.onnx,        predictor step and output layer
joiner.onnx
*.int8.onnx            dynamic int8 copies (``int8=True``)         onnx_quant
=====================  ==========================================  =======================

Every file carries the metadata of onnx_common (``metadata_props``); ``units.txt``
and ``bpe.model`` are copied beside them by the caller that knows where they are
(``wenet/bin/export_onnx.py``).
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Any, Dict, Mapping, Optional, Sequence

import torch

from wenet.export.onnx_common import has_ctc, has_decoder, is_transducer
from wenet.export.onnx_offline import export_ctc, export_decoder, export_encoder
from wenet.export.onnx_streaming import export_encoder_chunk
from wenet.export.onnx_transducer import export_transducer

GRAPH_NAMES = ("encoder", "encoder_chunk", "ctc", "decoder", "encoder_proj", "predictor",
               "joiner")
UNITS_NAME = "units.txt"
BPE_NAME = "bpe.model"


def export_onnx_models(model: torch.nn.Module, configs: Mapping[str, Any], output_dir: str,
                       chunk_size: int = 16, left_chunks: int = 4,
                       int8: bool = False) -> Dict[str, str]:
    """Write the ONNX files of ``model`` (built from ``configs``, the train.yaml with
    ``input_dim``) into ``output_dir``; ``chunk_size`` output frames per chunk and
    ``left_chunks`` chunks of cache for ``encoder_chunk.onnx`` (streaming models only);
    with ``int8`` also each file's ``*.int8.onnx``. Returns {name: path}, names as the
    files' without ``.onnx`` (``encoder``, ``encoder.int8``...)."""
    model = model.eval()
    os.makedirs(output_dir, exist_ok=True)

    def path_of(name: str) -> str:
        return os.path.join(output_dir, f"{name}.onnx")

    paths: Dict[str, str] = {}
    export_encoder(model, configs, path_of("encoder"))
    paths["encoder"] = path_of("encoder")
    if model.encoder.is_streaming():
        export_encoder_chunk(model, configs, path_of("encoder_chunk"), chunk_size, left_chunks)
        paths["encoder_chunk"] = path_of("encoder_chunk")
    else:
        logging.info("no encoder_chunk.onnx: the %s encoder was not trained for chunks "
                     "(use_dynamic_chunk / static_chunk_size, or a causal Zipformer)",
                     configs.get("encoder", "conformer"))
    if has_ctc(model):
        export_ctc(model, configs, path_of("ctc"))
        paths["ctc"] = path_of("ctc")
    if has_decoder(model):
        export_decoder(model, configs, path_of("decoder"))
        paths["decoder"] = path_of("decoder")
    if is_transducer(model):
        names = ("encoder_proj", "predictor", "joiner")
        export_transducer(model, configs, *(path_of(n) for n in names))
        paths.update({n: path_of(n) for n in names})
    if int8:
        from wenet.export.onnx_quant import quantize_file  # local: needs onnxruntime
        for name in list(paths):
            paths[f"{name}.int8"] = path_of(f"{name}.int8")
            quantize_file(paths[name], paths[f"{name}.int8"])
    remove_stale(output_dir, paths)
    return paths


def remove_stale(output_dir: str, written: Mapping[str, str],
                 graph_names: Sequence[str] = GRAPH_NAMES) -> None:
    """Remove the format's files (``graph_names`` and their int8 twins) that this export
    did not write (an earlier export's encoder_chunk.onnx or *.int8.onnx into the same
    dir): a runtime would take them for parts of this model."""
    for name in graph_names:
        for variant in (name, f"{name}.int8"):
            path = os.path.join(output_dir, f"{variant}.onnx")
            if variant not in written and os.path.isfile(path):
                os.remove(path)
                logging.warning("removed %s, left by an earlier export (not part of this "
                                "model's export)", path)


def copy_units(output_dir: str, units: str, bpe_model: Optional[str]) -> None:
    """Copy the units (and the BPE model, when there is one) into ``output_dir`` as
    ``units.txt`` and ``bpe.model``."""
    for src, name in ((units, UNITS_NAME), (bpe_model, BPE_NAME)):
        if src is None:
            continue
        dst = os.path.join(output_dir, name)
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)
        logging.info("copied %s to %s", src, dst)
