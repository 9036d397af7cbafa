"""A tiny experiment on disk for the recognition tests: test audio (tones over noise),
units.txt, train.yaml, a checkpoint of a seeded random model whose output layer is
sharpened (so that its hypotheses are not empty), optionally final.zip, and data lists."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import soundfile as sf
import torch
import yaml

from wenet.export.jit import export_jit
from wenet.models import init_model

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]

# A conformer + bidirectional attention decoder (U2++), fbank of 20 bins: the base that
# ``tiny_config`` changes.
BASE_CONFIG: Dict[str, Any] = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64,
                     "num_blocks": 2, "cnn_module_kernel": 3, "dropout_rate": 0.0},
    "decoder": "bitransformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                     "r_num_blocks": 1, "dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3, "reverse_weight": 0.3},
    "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                    "frame_length": 25, "dither": 1.0},
                     "resample_conf": {"resample_rate": 16000},
                     "batch_conf": {"batch_size": 3}},
    "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
}

# ``tiny_config`` changes that turn the base into a conformer transducer (LSTM predictor,
# a left-to-right attention decoder for rescoring) of width 16.
TRANSDUCER = {
    "encoder_conf": {"output_size": 16, "linear_units": 16, "num_blocks": 1},
    "decoder": "transformer",
    "decoder_conf": {"linear_units": 16, "r_num_blocks": None, "dropout_rate": None},
    "model": "transducer", "predictor": "lstm",
    "predictor_conf": {"embed_size": 8, "hidden_size": 8, "output_size": 8},
    "joint_conf": {"join_dim": 16},
    "model_conf": {"ctc_weight": None, "reverse_weight": None, "attention_weight": 0.3},
    "dataset_conf": {"resample_conf": None},
}


def merged(base: Dict[str, Any], changes: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``base`` with ``changes`` applied: a dict into a dict merges key by key,
    None removes the key, anything else replaces the value."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_config(*changes: Dict[str, Any]) -> Dict[str, Any]:
    """``BASE_CONFIG`` with each of ``changes`` merged in turn (see ``merged``)."""
    config = BASE_CONFIG
    for change in changes:
        config = merged(config, change)
    return copy.deepcopy(config)


def sharpen(model: torch.nn.Module, ctc: float = 1.0, ctc_blank: float = 0.0,
            eos: float = 0.0, joint: float = 1.0, joint_blank: float = 0.0) -> None:
    """Scale the CTC head's weight by ``ctc`` (the transducer joint's output by ``joint``)
    and lower the blank bias by ``ctc_blank`` (``joint_blank``) and the left decoder's eos
    bias by ``eos``, so that a random model emits tokens."""
    with torch.no_grad():
        if ctc != 1.0:
            model.ctc.ctc_lo.weight.mul_(ctc)
        if ctc_blank:
            model.ctc.ctc_lo.bias[0] -= ctc_blank
        if eos:
            model.decoder.left_decoder.output_layer.bias[-1] -= eos
        if joint != 1.0:
            model.joint.out.weight.mul_(joint)
        if joint_blank:
            model.joint.out.bias[0] -= joint_blank


def write_experiment(d: Path, config: Dict[str, Any], checkpoint: str = "model.pt",
                     units: Optional[Sequence[str]] = UNITS, jit: bool = False,
                     **sharpening: float) -> torch.nn.Module:
    """Write ``d/units.txt`` (unless ``units`` is None), ``d/train.yaml`` and
    ``d/<checkpoint>`` of ``init_model(config)`` seeded with 0 and ``sharpen``-ed by
    ``sharpening``; with ``jit`` also ``d/final.zip``. Returns the model."""
    d.mkdir(parents=True, exist_ok=True)
    if units is not None:
        (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)))
    (d / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    model = init_model(config)
    sharpen(model, **sharpening)
    torch.save(model.state_dict(), d / checkpoint)
    if jit:
        export_jit(model.eval(), str(d / "final.zip"))
    return model


def write_tones(d: Path, keys: Sequence[str], seconds: Sequence[float], seed: int = 0) -> None:
    """``d/<key>.wav``: 16 kHz float tones (200 Hz + 150 Hz per position) over noise."""
    rng = np.random.default_rng(seed)
    for i, (key, secs) in enumerate(zip(keys, seconds)):
        n = int(16000 * secs)
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(d / f"{key}.wav", wav.astype(np.float32), 16000)


def write_data_list(path: Path, wav_dir: Path, keys: Sequence[str],
                    txt_of: Callable[[str], Optional[str]] = lambda key: "abc") -> Path:
    """A raw data.list of ``wav_dir/<key>.wav``; ``txt_of(key)`` None leaves out "txt"."""
    lines = []
    for key in keys:
        obj = {"key": key, "wav": str(wav_dir / f"{key}.wav")}
        txt = txt_of(key)
        if txt is not None:
            obj["txt"] = txt
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_wav_scp(path: Path, wav_dir: Path, keys: Sequence[str]) -> Path:
    """A wav.scp of ``wav_dir/<key>.wav``."""
    path.write_text("".join(f"{key} {wav_dir / key}.wav\n" for key in keys))
    return path


def read_hyps(path: Path) -> Dict[str, str]:
    """key -> text of a result file (``key text`` lines; a bare key: empty text)."""
    return dict(line.split(" ", 1) if " " in line else (line, "")
                for line in path.read_text().splitlines())
