"""The torch-free half of audio reading: the bytes behind a ``wav.scp`` value, NIST
SPHERE headers, and decoding to numpy samples with libsndfile (soundfile).

``wenet.dataset.audio`` builds on this for everything that works on tensors. It is
separate so that a ``wav.scp`` pipe such as ``python tools/sph2wav.py -c 1 X.sph |``,
which runs once per recording (Switchboard has ~4,900 recording sides), starts in
a fraction of a second instead of paying for importing torch each time.
"""
from __future__ import annotations

import io
import subprocess
from typing import Dict, Tuple

import numpy as np
import soundfile as sf

SPHERE_MAGIC = b"NIST_1A"


class AudioError(RuntimeError):
    """Audio that cannot be read or decoded; the message names the source."""


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


def sphere_header(data: bytes) -> Dict[str, str]:
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


def refuse_shorten(data: bytes, name: str) -> None:
    """AudioError for shorten-compressed SPHERE, which libsndfile cannot decode."""
    coding = sphere_header(data).get("sample_coding", "")
    if "shorten" in coding.lower():
        raise AudioError(f"{name}: shorten-compressed NIST SPHERE (sample_coding {coding}), which "
                         "libsndfile cannot decode: install sph2pipe (e.g. from Kaldi's tools/) "
                         "and rerun the data preparation, so that wav.scp reads it through sph2pipe")


def libsndfile_reason(error: Exception) -> str:
    """libsndfile's own words for a failure ("Format not recognised."), without
    soundfile's "Error opening <_io.BytesIO object at 0x...>" prefix."""
    return str(getattr(error, "error_string", "") or error).strip()


def decode_samples(data: bytes, name: str = "<bytes>", dtype: str = "float32") -> Tuple[np.ndarray, int]:
    """Decode audio bytes libsndfile reads → (samples (channels, frames) of ``dtype``, rate).

    float32 is in [-1, 1]; int16 is libsndfile's 16-bit view of the same samples
    (for 16-bit, mu-law and a-law audio: the float32 samples times 32768, exactly).
    """
    if not data:
        raise AudioError(f"cannot decode audio {name}: empty file (0 bytes)")
    refuse_shorten(data, name)
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    except Exception as e:  # soundfile raises several types for bad data
        raise AudioError(f"cannot decode audio {name}: not audio: {libsndfile_reason(e)}") from e
    return np.ascontiguousarray(samples.T), int(rate)
