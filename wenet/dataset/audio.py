"""Audio reading shared by CMVN, shard making and the data pipeline.

torchaudio 2.11 has no load/save without FFmpeg, so audio goes through
soundfile. A ``wav.scp`` value is either a path or a Kaldi pipe command ending
in ``|`` whose standard output is an audio file.

NIST SPHERE (Switchboard, Hub5) is decoded by libsndfile too: 16-bit PCM in
either byte order, mu-law and a-law. Shorten-compressed SPHERE (``sample_coding``
containing ``shorten``) it cannot decode; such files are refused with an error
that says ``sph2pipe`` is needed.
"""
from __future__ import annotations

import io
import subprocess
from typing import Dict, Optional, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio


SPHERE_MAGIC = b"NIST_1A"


class AudioError(RuntimeError):
    """Audio that cannot be read or decoded; the message names the source."""


def _sphere_header(data: bytes) -> Dict[str, str]:
    """The ``name -type value`` fields of a NIST SPHERE header, values as text;
    ``{}`` when ``data`` is not SPHERE."""
    if not data.startswith(SPHERE_MAGIC):
        return {}
    lines = data[:1024].split(b"\n", 2)
    size = int(lines[1]) if len(lines) > 2 and lines[1].strip().isdigit() else 1024
    fields: Dict[str, str] = {}
    for line in data[:size].decode("ascii", "replace").splitlines()[2:]:
        parts = line.split(None, 2)
        if parts == ["end_head"]:
            break
        if len(parts) == 3 and parts[1].startswith("-"):
            fields[parts[0]] = parts[2].strip()
    return fields


def read_audio_bytes(spec: str) -> bytes:
    """The encoded bytes behind a wav.scp value (a path or ``cmd |``)."""
    spec = spec.strip()
    if spec.endswith("|"):
        cmd = spec[:-1].strip()
        proc = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise AudioError(f"command '{cmd}' failed with exit code {proc.returncode}: {err}")
        return proc.stdout
    try:
        with open(spec, "rb") as f:
            return f.read()
    except OSError as e:
        raise AudioError(f"cannot read audio file {spec}: {e}") from e


def decode_audio(data: bytes, name: str = "<bytes>") -> Tuple[torch.Tensor, int]:
    """Decode WAV/FLAC/OGG/SPHERE bytes → (float32 tensor (channels, samples) in [-1, 1], rate)."""
    coding = _sphere_header(data).get("sample_coding", "")
    if "shorten" in coding.lower():
        raise AudioError(f"{name}: shorten-compressed NIST SPHERE (sample_coding {coding}), which "
                         "libsndfile cannot decode: install sph2pipe (e.g. from Kaldi's tools/) "
                         "and rerun the data preparation, so that wav.scp reads it through sph2pipe")
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises several types for bad data
        raise AudioError(f"cannot decode audio {name}: {e}") from e
    return torch.from_numpy(np.ascontiguousarray(samples.T)), int(rate)


def load_audio(spec: str, start: float = 0.0, end: Optional[float] = None) -> Tuple[torch.Tensor, int]:
    """Read a wav.scp value, optionally cut to [start, end) seconds (end -1 or None: to the end)."""
    wav, rate = decode_audio(read_audio_bytes(spec), spec)
    return cut_audio(wav, rate, start, end), rate


def cut_audio(wav: torch.Tensor, rate: int, start: float = 0.0,
              end: Optional[float] = None) -> torch.Tensor:
    """Samples [round(start*rate), round(end*rate)) of (channels, samples); end -1/None: to the end.

    Shared by load_audio and the tools that decode a recording once and cut many segments.
    """
    if start > 0 or (end is not None and end >= 0):
        first = int(round(start * rate))
        last = wav.shape[1] if end is None or end < 0 else int(round(end * rate))
        wav = wav[:, first:last]
    return wav


def encode_wav16(wav: torch.Tensor, rate: int) -> bytes:
    """(channels, samples) float audio in [-1, 1] → 16-bit PCM WAV bytes.

    Samples that came from 16-bit audio are restored exactly (x * 32768 is an integer).
    """
    pcm = np.clip(np.round(wav.numpy().T * 32768.0), -32768, 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def to_mono(wav: torch.Tensor) -> torch.Tensor:
    """(channels, samples) → (1, samples) by averaging channels."""
    return wav if wav.shape[0] == 1 else wav.mean(dim=0, keepdim=True)


def resample(wav: torch.Tensor, orig: int, new: int) -> torch.Tensor:
    """Band-limited resampling (torchaudio.functional.resample); identity when rates match."""
    if orig == new:
        return wav
    return torchaudio.functional.resample(wav, orig, new)
