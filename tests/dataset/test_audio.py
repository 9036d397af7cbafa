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


def _pcm16_wav(path: Path, seconds: float, rate: int = 16000) -> bytes:
    rng = np.random.default_rng(3)
    sf.write(path, (0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32), rate,
             subtype="PCM_16")
    return path.read_bytes()


def test_a_truncated_wav_is_refused_naming_the_file_and_the_lengths(tmp_path):
    """A WAV whose header promises more samples than it holds (a copy cut short) is
    refused, by every reader: whole, a segment of it, in blocks (issue 57.14)."""
    from wenet.dataset.audio_bytes import decode_samples
    from wenet.inference.segments import file_blocks
    data = _pcm16_wav(tmp_path / "full.wav", 1.0)
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[:44 + 2 * 6000 + 1])  # 6000 whole frames and a stray byte
    why = (f"{cut}: truncated WAV: the header promises 1.000 s (32000 bytes of samples), "
           "the file holds 0.375 s (12001 bytes)")
    for read in (lambda: decode_samples(cut.read_bytes(), str(cut)),
                 lambda: load_audio(str(cut)), lambda: load_audio(str(cut), 0.1, 0.2),
                 lambda: file_blocks(str(cut), 0.25)):
        with pytest.raises(AudioError) as e:
            read()
        assert str(e.value).startswith(why)
    # a whole file, and a streamed header that gives no length (written to a pipe:
    # 0xFFFFFFFF, or sox's size near 2 GiB, in RIFF and data sizes), decode as before
    assert decode_samples(data)[0].shape == (1, 16000)
    for size in (0xFFFFFFFF, 0x7FFFF000):
        placeholder = size.to_bytes(4, "little")
        streamed = data[:4] + placeholder + data[8:40] + placeholder + data[44:]
        np.testing.assert_array_equal(decode_samples(streamed)[0], decode_samples(data)[0])
