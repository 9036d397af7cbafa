"""load_audio's segments: a part of a seekable file is read alone, and gives exactly the
samples of decoding the whole file and cutting (the reference here); pipes, other
containers and bad files keep the whole-file path and its errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.local.test_swbd_prep import tone, write_sphere
from wenet.dataset.audio import AudioError, cut_audio, decode_audio, load_audio, read_audio_bytes

RATE = 16000
# (start, end) in seconds: inside, from 0, to the end (-1 and None), past the end,
# reversed (empty), a start that does not fall on a sample
CUTS = [(0.25, 0.75), (0.0, 0.5), (0.6, -1), (0.6, None), (0.9, 5.0), (0.7, 0.3),
        (0.123456, 0.654321)]


def whole_then_cut(spec: str, start: float, end):
    wav, rate = decode_audio(read_audio_bytes(spec), spec)
    return cut_audio(wav, rate, start, end), rate


def _files(tmp_path: Path):
    samples = tone(1.0, channels=2, seed=3).T  # (n, 2) int16
    out = {}
    for name, kw in (("pcm16.wav", {"subtype": "PCM_16"}), ("float.wav", {"subtype": "FLOAT"}),
                     ("pcm16.flac", {"subtype": "PCM_16"}), ("vorbis.ogg", {"subtype": "VORBIS"})):
        if name.endswith(".ogg") and "OGG" not in sf.available_formats():
            continue
        data = samples / 32768.0 if kw["subtype"] in ("FLOAT", "VORBIS") else samples
        sf.write(tmp_path / name, data, RATE, **kw)
        out[name] = str(tmp_path / name)
    write_sphere(tmp_path / "ulaw.sph", tone(1.0, channels=2, seed=4).astype(np.uint8), "ulaw")
    out["ulaw.sph"] = str(tmp_path / "ulaw.sph")
    return out


@pytest.mark.parametrize("start,end", CUTS)
def test_a_segment_equals_the_cut_of_the_whole_file(tmp_path, start, end):
    for name, path in _files(tmp_path).items():
        for spec in (path, f"cat {path} |"):
            wav, rate = load_audio(spec, start, end)
            ref, ref_rate = whole_then_cut(spec, start, end)
            assert rate == ref_rate and wav.dtype == ref.dtype == torch.float32
            assert wav.shape == ref.shape and torch.equal(wav, ref), (name, spec, start, end)


def test_a_segment_is_read_without_decoding_the_file(tmp_path, monkeypatch):
    path = _files(tmp_path)["pcm16.flac"]
    seen = []
    monkeypatch.setattr("wenet.dataset.audio.read_audio_bytes", lambda spec: seen.append(spec))
    wav, _ = load_audio(path, 0.25, 0.5)
    assert wav.shape == (2, 4000) and seen == []


def test_bad_files_keep_their_errors(tmp_path):
    with pytest.raises(AudioError, match="cannot read audio file .*missing.wav"):
        load_audio(str(tmp_path / "missing.wav"), 0.5, 1.0)
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(AudioError, match="text.wav: not audio"):
        load_audio(str(tmp_path / "text.wav"), 0.5, 1.0)
    write_sphere(tmp_path / "s.sph", tone(0.2), "pcm")
    data = (tmp_path / "s.sph").read_bytes()
    head = data[:1024].replace(b"sample_coding -s3 pcm", b"sample_coding -s26 pcm,embedded-shorten-v2.00", 1)
    (tmp_path / "s.sph").write_bytes(head[:1024] + data[1024:])
    with pytest.raises(AudioError, match="shorten-compressed.*install sph2pipe"):
        load_audio(str(tmp_path / "s.sph"), 0.05, 0.1)
