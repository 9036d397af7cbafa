"""Audio reading shared by CMVN, shard making and the data pipeline.

torchaudio 2.11 has no load/save without FFmpeg, so audio goes through
soundfile. A ``wav.scp`` value is either a path or a Kaldi pipe command ending
in ``|`` whose standard output is an audio file.

NIST SPHERE (Switchboard, Hub5) is decoded by libsndfile too: 16-bit PCM in
either byte order, mu-law and a-law. Shorten-compressed SPHERE (``sample_coding``
containing ``shorten``) it cannot decode; such files are refused with an error
that says ``sph2pipe`` is needed.

``AUDIO_FORMATS`` is the one list of audio formats the project stores and reads:
the shard writer keeps audio in these formats byte for byte (and re-encodes any
other audio libsndfile decodes as WAV), the shard reader accepts exactly these
member suffixes. It holds the formats of ``_FORMATS`` that this libsndfile build
decodes (``soundfile.available_formats()``/``available_subtypes()``).
"""
from __future__ import annotations

import io
from typing import FrozenSet, NamedTuple, Optional, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio

from wenet.dataset.audio_bytes import (AudioError, decode_samples, libsndfile_reason, read_audio_bytes,
                                       refuse_shorten, refuse_truncated_file)

# (member suffix, libsndfile container, subtype or None for any subtype). Lossy
# formats are here so they are stored as they are, never decoded and re-encoded.
_FORMATS = (("wav", "WAV", None), ("wav", "WAVEX", None), ("flac", "FLAC", None),
            ("ogg", "OGG", "VORBIS"), ("opus", "OGG", "OPUS"),
            ("mp3", "MP3", None), ("sph", "NIST", None))


def _decodable(container: str, subtype: Optional[str]) -> bool:
    """True when this libsndfile build reads ``container`` (with ``subtype``, if given)."""
    if container not in sf.available_formats():
        return False
    return subtype is None or subtype in sf.available_subtypes(container)


AUDIO_FORMATS: FrozenSet[str] = frozenset(
    suffix for suffix, container, subtype in _FORMATS if _decodable(container, subtype))


class AudioHeader(NamedTuple):
    """What libsndfile reads from an audio header."""

    container: str  # soundfile format name: WAV, FLAC, OGG, MP3, NIST, AIFF, ...
    subtype: str    # sample coding: PCM_16, FLOAT, VORBIS, ...
    rate: int

    @property
    def suffix(self) -> Optional[str]:
        """The ``AUDIO_FORMATS`` suffix of this audio, None when its format is not on the list."""
        for suffix, container, subtype in _FORMATS:
            if (suffix in AUDIO_FORMATS and self.container == container
                    and subtype in (None, self.subtype)):
                return suffix
        return None


def audio_header(data: bytes, name: str = "<bytes>") -> AudioHeader:
    """Header of encoded audio; AudioError when libsndfile cannot decode it."""
    refuse_shorten(data, name)
    try:
        info = sf.info(io.BytesIO(data))
    except Exception as e:  # soundfile raises several types for bad data
        raise AudioError(f"cannot read audio header of {name}: not audio libsndfile decodes "
                         f"({libsndfile_reason(e)}); convert such audio to WAV or FLAC "
                         "first") from e
    return AudioHeader(info.format, info.subtype, int(info.samplerate))


def decode_audio(data: bytes, name: str = "<bytes>") -> Tuple[torch.Tensor, int]:
    """Decode audio bytes libsndfile reads (see ``AUDIO_FORMATS``) →
    (float32 tensor (channels, samples) in [-1, 1], rate)."""
    samples, rate = decode_samples(data, name)
    return torch.from_numpy(samples), rate


# containers whose samples libsndfile seeks to exactly, so that a segment can be read alone
_SEEKABLE = frozenset({"WAV", "WAVEX", "FLAC", "NIST", "AIFF", "W64", "CAF"})


def load_audio(spec: str, start: float = 0.0, end: Optional[float] = None) -> Tuple[torch.Tensor, int]:
    """Read a wav.scp value, optionally cut to [start, end) seconds (end -1 or None: to the end).

    A segment of a file (not a pipe) in a container libsndfile seeks in exactly is read
    alone: a 3 s segment of an hour-long WAV costs a seek, not the hour (a raw data.list
    with ``start``/``end`` reads every segment this way in every epoch). The samples are
    those of decoding the whole file and cutting."""
    if _is_cut(start, end) and not spec.strip().endswith("|"):
        part = _read_part(spec.strip(), start, end)
        if part is not None:
            return part
    wav, rate = decode_audio(read_audio_bytes(spec), spec)
    return cut_audio(wav, rate, start, end), rate


def _is_cut(start: float, end: Optional[float]) -> bool:
    return start > 0 or (end is not None and end >= 0)


def _read_part(path: str, start: float, end: Optional[float]) -> Optional[Tuple[torch.Tensor, int]]:
    """Samples ``[round(start * rate), round(end * rate))`` of a seekable file read alone, as
    ``cut_audio`` would cut them; None when the file is not one (the caller then decodes
    it whole, which also gives any error its full message)."""
    try:
        with sf.SoundFile(path) as f:
            if f.format not in _SEEKABLE or not f.seekable():
                return None
            if f.format == "NIST":
                with open(path, "rb") as head:
                    refuse_shorten(head.read(1024), path)
            refuse_truncated_file(path)
            rate = int(f.samplerate)
            first = int(round(start * rate))
            last = f.frames if end is None or end < 0 else int(round(end * rate))
            last = min(last, f.frames)
            first = min(first, last)
            f.seek(first)
            samples = f.read(last - first, dtype="float32", always_2d=True)
    except Exception:  # not audio libsndfile opens (or shorten SPHERE): the whole-file path says why
        return None
    return torch.from_numpy(np.ascontiguousarray(samples.T)), rate


class RecordingCache:
    """The last decoded recording, so that consecutive segments of one recording are read
    and decoded once: a ``wav.scp`` pipe such as sph2pipe runs once per recording, not
    once per segment (a Switchboard side has ~100). Holds one recording's samples."""

    def __init__(self) -> None:
        self.spec: Optional[str] = None
        self.audio: Optional[Tuple[torch.Tensor, int]] = None

    def lookup(self, spec: str) -> Optional[Tuple[torch.Tensor, int]]:
        """The decoded audio of ``spec`` if it is the one held, else None."""
        return self.audio if spec == self.spec else None

    def get(self, spec: str, data: Optional[bytes] = None) -> Tuple[torch.Tensor, int]:
        """The decoded audio of ``spec`` (its bytes ``data`` when already read), held for
        the next call; AudioError when it cannot be read."""
        if spec != self.spec:
            self.spec, self.audio = None, None
            self.audio = decode_audio(read_audio_bytes(spec) if data is None else data, spec)
            self.spec = spec
        assert self.audio is not None
        return self.audio


def cut_audio(wav: torch.Tensor, rate: int, start: float = 0.0,
              end: Optional[float] = None) -> torch.Tensor:
    """Samples [round(start*rate), round(end*rate)) of (channels, samples); end -1/None: to the end.

    Shared by load_audio and the tools that decode a recording once and cut many segments.
    """
    if _is_cut(start, end):
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


def reencode_wav(data: bytes, name: str = "<bytes>") -> bytes:
    """Audio libsndfile decodes (AIFF, CAF, W64, ...) → WAV bytes with the same samples:
    the source's sample coding when WAV has it (PCM_16 stays PCM_16), else 32-bit float."""
    header = audio_header(data, name)
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float64", always_2d=True)
    except Exception as e:  # soundfile raises several types for bad data
        raise AudioError(f"cannot decode audio {name}: {e}") from e
    subtype = header.subtype if header.subtype in sf.available_subtypes("WAV") else "FLOAT"
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype=subtype)
    return buf.getvalue()


def to_mono(wav: torch.Tensor) -> torch.Tensor:
    """(channels, samples) → (1, samples) by averaging channels."""
    return wav if wav.shape[0] == 1 else wav.mean(dim=0, keepdim=True)


def resample(wav: torch.Tensor, orig: int, new: int) -> torch.Tensor:
    """Band-limited resampling (torchaudio.functional.resample); identity when rates match."""
    if orig == new:
        return wav
    with torch.device(wav.device):  # torchaudio makes part of its kernel on the default device
        return torchaudio.functional.resample(wav, orig, new)
