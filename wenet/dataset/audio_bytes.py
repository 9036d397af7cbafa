"""The torch-free half of audio reading: the bytes behind a ``wav.scp`` value, NIST
SPHERE headers, and decoding to numpy samples with libsndfile (soundfile).

``wenet.dataset.audio`` builds on this for everything that works on tensors. It is
separate so that a ``wav.scp`` pipe such as ``python tools/sph2wav.py -c 1 X.sph |``,
which runs once per recording (Switchboard has ~4,900 recording sides), starts in
a fraction of a second instead of paying for importing torch each time.
"""
from __future__ import annotations

import io
import os
import subprocess
from typing import Any, Dict, Sequence, Tuple

import numpy as np
import soundfile as sf

SPHERE_MAGIC = b"NIST_1A"


class AudioError(RuntimeError):
    """Audio that cannot be read or decoded; the message names the source."""


def is_pipe(spec: str) -> bool:
    """Whether a wav.scp value is a Kaldi pipe (``cmd |``: a shell command run to read it)."""
    return spec.rstrip().endswith("|")


def refuse_pipes(items: Sequence[Tuple[str, Any]], how_to_allow: str) -> None:
    """ValueError naming every input that is a Kaldi pipe (``cmd |``) and how to allow them."""
    pipes = [f"{key} ({spec})" for key, spec in items
             if isinstance(spec, str) and is_pipe(spec)]
    if pipes:
        raise ValueError(f"{len(pipes)} input(s) are Kaldi pipes, shell commands that would be "
                         f"run: {'; '.join(pipes[:5])}{' ...' if len(pipes) > 5 else ''}; "
                         f"pipes run only with {how_to_allow}")


def read_audio_bytes(spec: str) -> bytes:
    """The encoded bytes behind a wav.scp value (a path or ``cmd |``)."""
    spec = spec.strip()
    if is_pipe(spec):
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


# data chunk sizes that promise nothing: what a writer that cannot seek back to its header
# leaves (0 or 0xFFFFFFFF; sox to a pipe writes a size near 2 GiB)
_STREAMED_MIN = 0x7F000000
HEAD_BYTES = 65536  # the header chunks of a WAV file are looked for in this much


def refuse_truncated(head: bytes, size: int, name: str) -> None:
    """AudioError when ``head``, the start of ``size`` bytes of audio, is a RIFF WAVE header
    whose data chunk promises more bytes than there are: a file cut short (an interrupted
    copy or download) decodes only its first part, and its transcript would silently miss
    the rest. A streamed header (a pipe's, no length known) is not a promise."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return
    pos, byte_rate = 12, 0
    while pos + 8 <= len(head):
        chunk, length = head[pos:pos + 4], int.from_bytes(head[pos + 4:pos + 8], "little")
        if chunk == b"fmt " and pos + 20 <= len(head):
            byte_rate = int.from_bytes(head[pos + 16:pos + 20], "little")
        if chunk == b"data":
            held = size - pos - 8
            if length == 0 or length >= _STREAMED_MIN or held >= length:
                return
            seconds = (lambda n: f"{n / byte_rate:.3f} s" if byte_rate else "?")
            raise AudioError(f"{name}: truncated WAV: the header promises {seconds(length)} "
                             f"({length} bytes of samples), the file holds {seconds(held)} "
                             f"({held} bytes): a copy or download cut short? Make it again "
                             "(or rewrite its header, e.g. sox IN.wav OUT.wav, to use only "
                             "what it holds)")
        pos += 8 + length + (length & 1)


def refuse_truncated_file(path: str) -> None:
    """:func:`refuse_truncated` of an audio file read by path."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
        size = os.path.getsize(path)
    except OSError as e:
        raise AudioError(f"cannot read audio file {path}: {e}") from e
    refuse_truncated(head, size, path)


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
    refuse_truncated(data[:HEAD_BYTES], len(data), name)
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    except Exception as e:  # soundfile raises several types for bad data
        raise AudioError(f"cannot decode audio {name}: not audio: {libsndfile_reason(e)}") from e
    return np.ascontiguousarray(samples.T), int(rate)
