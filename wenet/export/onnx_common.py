"""What every ONNX file of a model directory shares: the one export step
(``export_graph``: trace, metadata, check, atomic write) and the metadata keys of
docs/onnx_format.md that describe the model as a whole and its encoder.

Metadata values are strings (ONNX ``metadata_props``); a runtime reads them by key.
"""
from __future__ import annotations

import hashlib
import io
import logging
import warnings
from typing import Any, Dict, List, Mapping, Sequence

import torch

from wenet.dataset.fbank import FeatureConf
from wenet.transformer.ctc import CTC
from wenet.utils.file_utils import atomic_open

OPSET = 17
FORMAT_VERSION = "1"
DEFAULT_SAMPLE_RATE = 16000  # the feature pipeline's rate when the config resamples nothing

# Warnings of torch 2.14's TorchScript-based exporter that say nothing about these
# graphs, silenced around the export only (any other warning still shows):
# - the exporter itself is "legacy" (torch.export's replacement needs guards on the
#   streaming offset and drops dynamic_axes), and an internal call of it is deprecated;
# - TracerWarnings flag Python branches on shapes: the wrappers keep those branches
#   independent of the dynamic axes (the tests run other shapes than the examples);
# - a Slice with step -1 (the decoder's reversal) is not constant-folded: it is not
#   constant anyway;
# - the LSTM warning about batch sizes concerns graphs whose h0/c0 are not inputs;
#   the predictor's are (state_0, state_1).
_KNOWN_HARMLESS = (
    (DeprecationWarning, r"You are using the legacy TorchScript-based ONNX export"),
    (DeprecationWarning, r"The feature will be removed"),
    (torch.jit.TracerWarning, r""),
    (UserWarning, r"Constant folding - Only steps=1 can be constant folded"),
    (UserWarning, r"Exporting a model to ONNX with a batch_size other than 1, with a "
                  r"variable length with LSTM"),
)


def is_transducer(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a transducer (it has the joint's decoding step)."""
    return hasattr(model, "forward_joint_step")


def has_ctc(model: torch.nn.Module) -> bool:
    """Whether the model has a CTC head: every attention model; a transducer only when
    it was trained with a CTC loss (otherwise its ``ctc`` is a placeholder)."""
    return isinstance(getattr(model, "ctc", None), CTC)


def has_decoder(model: torch.nn.Module) -> bool:
    """Whether the model has an attention decoder: every attention model; a transducer
    only when it was trained with an attention loss."""
    if is_transducer(model):
        return float(model.attention_weight) > 0.0
    return True


def export_graph(module: torch.nn.Module, args: tuple, path: str, input_names: Sequence[str],
                 output_names: Sequence[str], dynamic_axes: Dict[str, Dict[int, str]],
                 metadata: Mapping[str, str]) -> None:
    """torch.onnx.export of ``module`` on ``args`` into memory, ``metadata`` into
    metadata_props, checked by onnx.checker, then written with atomic_open (no
    half-written model on failure).

    The TorchScript-based exporter (dynamo=False) is used: the graphs are small, its
    dynamic_axes cover the varying batch sizes and lengths, and it needs no guards on
    the streaming encoder's data-dependent offset. Tracing bakes Python branches on
    shapes into the graph; each caller's wrapper keeps them independent of the dynamic
    axes (tests/export/test_onnx_models.py runs every graph on other shapes than the
    tracing example's).
    """
    import onnx  # local: only export needs it

    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        for category, message in _KNOWN_HARMLESS:
            warnings.filterwarnings("ignore", message=message, category=category)
        torch.onnx.export(module.eval(), args, buffer, dynamo=False, opset_version=OPSET,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, do_constant_folding=True)
    proto = onnx.load_from_string(buffer.getvalue())
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key = key
        entry.value = value
    onnx.checker.check_model(proto)
    with atomic_open(path, "wb") as f:
        f.write(proto.SerializeToString())
    logging.info("exported %s", path)


def common_metadata(model: torch.nn.Module, configs: Mapping[str, Any]) -> Dict[str, str]:
    """The keys every file of the directory carries (docs/onnx_format.md, Metadata)."""
    meta = {
        "wenet_onnx_version": FORMAT_VERSION,
        "model_type": "transducer" if is_transducer(model) else "ctc_attention",
        "encoder": configs.get("encoder", "conformer"),
        "vocab_size": int(model.vocab_size),
        "blank_id": int(model.blank_symbol()) if is_transducer(model) else 0,
        "sos_symbol": int(model.sos_symbol()),
        "eos_symbol": int(model.eos_symbol()),
        "export_id": export_id(model),
    }
    return {k: str(v) for k, v in meta.items()}


def export_id(model: torch.nn.Module) -> str:
    """A hash of the model's weights, the same in every file of one export, so that a
    runtime can refuse files of two exports mixed in one directory."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def metadata_value(value: Any) -> str:
    """A metadata string: floats as %g (``25``, ``0.3``), the rest as str."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _joined(values: Sequence[Any], sep: str = ",") -> str:
    return sep.join(str(v) for v in values)


def predictor_state_layout(model: torch.nn.Module) -> List[torch.Tensor]:
    """The predictor's initial state for a batch of 1 (its dtypes and shapes)."""
    return [s.cpu() for s in model.predictor_init_state(1)]


def transducer_metadata(model: torch.nn.Module) -> Dict[str, str]:
    """The transducer keys of the encoder files: the joint's width, the predictor's
    state layout (dtypes, shapes with ``N`` for the batch) and the big blanks."""
    states = predictor_state_layout(model)
    dtypes = [str(s.dtype).replace("torch.", "") for s in states]
    shapes = [_joined(["N"] + list(s.shape[1:])) for s in states]
    return {
        "join_dim": str(int(model.joint.enc_proj.out_features)),
        "predictor_num_states": str(len(states)),
        "predictor_state_dtypes": _joined(dtypes),
        "predictor_state_shapes": _joined(shapes, ";"),
        "big_blank_ids": _joined(model.big_blank_ids()),
        "big_blank_durations": _joined(model.big_blank_durations()),
    }


def encoder_metadata(model: torch.nn.Module, configs: Mapping[str, Any]) -> Dict[str, str]:
    """What a runtime needs to drive ``encoder.onnx`` and decode its output: the common
    keys, the encoder's geometry, the heads it has, the features (fbank of
    ``wenet/dataset/fbank.py`` without dither) and, for transducers, the predictor's
    layout."""
    encoder = model.encoder
    features = FeatureConf.from_config(configs)
    meta = {
        "output_size": encoder.output_size(),
        "subsampling_rate": int(model.subsampling_rate()),
        "right_context": int(model.right_context()),
        "min_input_frames": int(encoder.min_input_frames()),
        "streaming": int(encoder.is_streaming()),
        "has_ctc": int(has_ctc(model)),
        "has_decoder": int(has_decoder(model)),
        "is_bidirectional_decoder": int(model.is_bidirectional_decoder()),
        "reverse_weight": float(model.reverse_weight),
        "sample_rate": features.resample_rate or DEFAULT_SAMPLE_RATE,
        "num_mel_bins": features.num_mel_bins,
        "frame_length": features.frame_length,
        "frame_shift": features.frame_shift,
    }
    out = common_metadata(model, configs)
    out.update({k: metadata_value(v) for k, v in meta.items()})
    if is_transducer(model):
        out.update(transducer_metadata(model))
    return out
