"""NIST SPHERE audio (Switchboard, Hub5) without sph2pipe where possible.

A SPHERE file is a text header -- ``NIST_1A``, the header size, then
``name -type value`` lines up to ``end_head`` -- followed by raw samples.
This module reads uncompressed 16-bit PCM (either byte order) and 8-bit
mu-law, any number of channels. Shorten-compressed files (``sample_coding``
containing ``shorten``, as in the LDC releases of Switchboard-1) need the
``sph2pipe`` tool; without it a clear error says to install it.

Also a command line, used in ``wav.scp`` pipes when sph2pipe is absent::

    python -m wenet.utils.sphere FILE.sph [CHANNEL] > out.wav

writes one channel (1-based, like ``sph2pipe -c``) or all channels as a
16-bit PCM WAV on stdout. The module imports only numpy and soundfile.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
from typing import Dict, Optional, Tuple, Union

import numpy as np
import soundfile as sf

HeaderValue = Union[int, float, str]


class SphereError(RuntimeError):
    """A SPHERE file that cannot be parsed or decoded; the message names it."""


def parse_header(data: bytes, name: str = "<bytes>") -> Tuple[Dict[str, HeaderValue], int]:
    """Header fields and header size (bytes) of SPHERE data starting at ``data[0]``."""
    if not data.startswith(b"NIST_1A"):
        raise SphereError(f"{name}: not a NIST SPHERE file (no NIST_1A magic)")
    lines = data[:1024].split(b"\n")
    try:
        size = int(lines[1].strip())
    except (IndexError, ValueError):
        raise SphereError(f"{name}: bad SPHERE header size line") from None
    if size < 16 or size > len(data):
        raise SphereError(f"{name}: SPHERE header size {size} does not fit the file")
    fields: Dict[str, HeaderValue] = {}
    for raw in data[:size].split(b"\n")[2:]:
        line = raw.decode("ascii", "replace").strip()
        if line == "end_head":
            return fields, size
        if not line or line.startswith(";"):
            continue
        parts = line.split(None, 2)
        if len(parts) != 3 or not parts[1].startswith("-"):
            raise SphereError(f"{name}: bad SPHERE header line {line!r}")
        key, kind, value = parts
        if kind == "-i":
            fields[key] = int(value)
        elif kind == "-r":
            fields[key] = float(value)
        else:  # -sN: a string of N characters
            fields[key] = value
    raise SphereError(f"{name}: SPHERE header has no end_head")


def _ulaw_table() -> np.ndarray:
    """G.711 mu-law byte -> linear 16-bit sample, for all 256 codes."""
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


ULAW_TO_LINEAR = _ulaw_table()


def _via_sph2pipe(path: str) -> Tuple[np.ndarray, int]:
    exe = shutil.which("sph2pipe")
    if exe is None:
        raise SphereError(
            f"{path}: shorten-compressed SPHERE needs sph2pipe, which is not on PATH; "
            "install sph2pipe (e.g. from Kaldi's tools/ or the LDC) and rerun")
    proc = subprocess.run([exe, "-f", "wav", "-p", path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise SphereError(f"{path}: sph2pipe failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
    samples, rate = sf.read(io.BytesIO(proc.stdout), dtype="int16", always_2d=True)
    return np.ascontiguousarray(samples.T), int(rate)


def read_sphere(path: str) -> Tuple[np.ndarray, int]:
    """Samples (int16, shape [channels, samples]) and sample rate of a SPHERE file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SphereError(f"cannot read {path}: {e}") from e
    header, size = parse_header(data, path)
    coding = str(header.get("sample_coding", "pcm")).lower()
    if "shorten" in coding:
        return _via_sph2pipe(path)
    channels = int(header.get("channel_count", 1))
    rate = int(header.get("sample_rate", 0))
    width = int(header.get("sample_n_bytes", 1 if "ulaw" in coding or "mu-law" in coding else 2))
    if rate <= 0 or channels <= 0:
        raise SphereError(f"{path}: SPHERE header lacks a valid sample_rate/channel_count")
    body = data[size:]
    if coding in ("ulaw", "mu-law") and width == 1:
        samples = ULAW_TO_LINEAR[np.frombuffer(body, dtype=np.uint8)]
    elif coding == "pcm" and width == 2:
        order = str(header.get("sample_byte_format", "01"))
        dtype = ">i2" if order == "10" else "<i2"
        samples = np.frombuffer(body[: len(body) // 2 * 2], dtype=dtype).astype(np.int16)
    else:
        raise SphereError(f"{path}: unsupported SPHERE coding {coding!r} with {width}-byte samples")
    count = header.get("sample_count")
    frames = len(samples) // channels
    if isinstance(count, int) and count < frames:
        frames = count
    samples = samples[: frames * channels].reshape(frames, channels).T
    return np.ascontiguousarray(samples), rate


def sphere_to_wav(path: str, channel: Optional[int] = None) -> bytes:
    """A 16-bit PCM WAV of one channel (1-based) or of all channels of a SPHERE file."""
    samples, rate = read_sphere(path)
    if channel is not None:
        if not 1 <= channel <= samples.shape[0]:
            raise SphereError(f"{path}: has {samples.shape[0]} channels, no channel {channel}")
        samples = samples[channel - 1: channel]
    out = io.BytesIO()
    sf.write(out, samples.T, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _main(argv: Optional[list] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="SPHERE file -> 16-bit WAV on stdout")
    parser.add_argument("sph")
    parser.add_argument("channel", nargs="?", type=int, help="1-based channel (default: all)")
    args = parser.parse_args(argv)
    try:
        sys.stdout.buffer.write(sphere_to_wav(args.sph, args.channel))
    except SphereError as e:
        sys.stderr.write(f"sphere: error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
