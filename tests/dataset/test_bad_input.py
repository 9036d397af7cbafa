"""Bad input never stops the data pipeline: each case is skipped (or repaired),
counted under its reason, and named in a warning."""
from __future__ import annotations

import functools
import http.server
import io
import logging
import os
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.dataset.test_pipeline import (PLAIN, RATE, TABLE, collect, reference_fbank, tone,
                                   wav_bytes, write_shard)
from wenet.dataset.dataset import Dataset
from wenet.dataset.audio import resample
from wenet.dataset.fbank import compute_fbank

GOOD = [("good.txt", b"ab c"), ("good.wav", wav_bytes(tone(0.4, 1)))]


def float_wav_with(value: float, at: int = 1234) -> bytes:
    """A 32-bit float WAV of a good tone with one sample replaced by ``value``."""
    x = tone(0.4, 2).astype(np.float32) / 32768
    x[at] = value
    buf = io.BytesIO()
    sf.write(buf, x, RATE, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def _run(tmp_path, lines, data_type="shard", conf=PLAIN):
    data_list = tmp_path / "data.list"
    data_list.write_text("".join(line + "\n" for line in lines))
    ds = Dataset(data_type, str(data_list), TABLE, conf)
    return collect(ds), ds.last_stats


def _shard(tmp_path, members, name="s.tar") -> str:
    path = str(tmp_path / name)
    write_shard(path, members)
    return path


BAD_MEMBERS = {
    "audio_decode_error": [("bad.txt", b"ab"), ("bad.wav", b"RIFF\x00\x01garbage" * 9)],
    "missing_transcript": [("bad.wav", wav_bytes(tone(0.4, 2)))],
    "missing_audio": [("bad.txt", b"ab")],
    "empty_transcript": [("bad.txt", b"  \n"), ("bad.wav", wav_bytes(tone(0.4, 2)))],
    "bad_transcript": [("bad.txt", b"a\xff\xfeb"), ("bad.wav", wav_bytes(tone(0.4, 2)))],
    "empty_audio": [("bad.txt", b"ab"), ("bad.wav", wav_bytes(np.zeros(0, np.int16)))],
    "unsupported_audio_format": [("bad.txt", b"ab"), ("bad.m4a", b"\x00\x00\x00\x20ftypM4A ")],
    "non_finite_audio": [("bad.txt", b"ab"), ("bad.wav", float_wav_with(float("nan")))],
    # finite, but 1e30 * 32768 squared overflows float32 in the power spectrum
    "non_finite_features": [("bad.txt", b"ab"), ("bad.wav", float_wav_with(1e30))],
}


@pytest.mark.parametrize("reason", sorted(BAD_MEMBERS))
def test_bad_utterance_in_shard_is_skipped_and_counted(tmp_path, caplog, reason):
    shard = _shard(tmp_path, GOOD + BAD_MEMBERS[reason] + [
        ("after.txt", b"ba"), ("after.wav", wav_bytes(tone(0.3, 3)))])
    with caplog.at_level(logging.INFO):
        got, stats = _run(tmp_path, [shard])
    assert sorted(got) == ["after", "good"]
    assert stats.counts[reason] == 1
    assert sum(stats.counts.values()) == 1
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert any("bad" in m and shard in m and reason in m for m in warnings), warnings
    summary = [r.message for r in caplog.records if "reasons:" in r.message]
    assert len(summary) == 1 and f"{reason}=1" in summary[0]


def test_stereo_is_downmixed_and_logged(tmp_path, caplog):
    stereo = tone(0.5, 4, channels=2)
    shard = _shard(tmp_path, [("st.txt", b"ab"), ("st.wav", wav_bytes(stereo))])
    with caplog.at_level(logging.WARNING):
        got, stats = _run(tmp_path, [shard])
    assert stats.counts["stereo_downmixed"] == 1
    mono = stereo.astype(np.float32).mean(axis=1)
    torch.testing.assert_close(got["st"][0], reference_fbank(mono), rtol=0, atol=1e-4)
    assert any("st" in r.message and "mono" in r.message for r in caplog.records)


def test_wrong_sample_rate_is_resampled_and_logged(tmp_path, caplog):
    audio = tone(0.5, 5, rate=8000)
    shard = _shard(tmp_path, [("lo.txt", b"ab"), ("lo.wav", wav_bytes(audio, rate=8000))])
    with caplog.at_level(logging.WARNING):
        got, stats = _run(tmp_path, [shard])
    assert stats.counts["resampled"] == 1
    wav = torch.from_numpy(audio.astype(np.float32) / 32768).unsqueeze(0)
    expected = compute_fbank(resample(wav, 8000, RATE), RATE)
    assert got["lo"][0].shape == (48, 80)  # 0.5 s at 16 kHz, 25 ms / 10 ms frames
    torch.testing.assert_close(got["lo"][0], expected, rtol=0, atol=1e-4)
    assert any("lo" in r.message and "8000" in r.message for r in caplog.records)


def test_truncated_tar_keeps_what_came_before(tmp_path, caplog):
    members = GOOD + [("two.txt", b"ba"), ("two.wav", wav_bytes(tone(0.4, 6))),
                      ("cut.txt", b"ab"), ("cut.wav", wav_bytes(tone(0.4, 7)))]
    shard = _shard(tmp_path, members)
    data = open(shard, "rb").read()
    # cut inside the last wav member: its header is followed by only part of its data
    cut = data.rindex(b"cut.wav") + 512 + 1000
    with open(shard, "wb") as f:
        f.write(data[:cut])
    with caplog.at_level(logging.WARNING):
        got, stats = _run(tmp_path, [shard])
    assert sorted(got) == ["good", "two"]
    assert stats.counts["shard_truncated"] == 1
    assert any(shard in r.message and "cut" in r.message for r in caplog.records)


def test_unsafe_member_names_are_never_used_as_paths(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    target = tmp_path / "escaped.wav"
    shard = _shard(tmp_path, GOOD + [
        (str(tmp_path / "abs.txt"), b"ab"), (str(target), wav_bytes(tone(0.3, 8))),
        ("../escaped.txt", b"ab"), ("../escaped.wav", wav_bytes(tone(0.3, 8)))])
    before = sorted([*os.listdir(tmp_path), "data.list"])  # _run adds the list
    got, stats = _run(tmp_path, [shard])
    assert list(got) == ["good"]
    assert stats.counts["unsafe_member_name"] == 4
    assert not target.exists() and os.listdir(work) == []
    assert sorted(os.listdir(tmp_path)) == before


def test_unreadable_shards_are_skipped(tmp_path, caplog):
    good = _shard(tmp_path, GOOD)
    not_tar = tmp_path / "noise.tar"
    not_tar.write_bytes(os.urandom(3000))
    lines = [str(tmp_path / "missing.tar"), str(not_tar), str(tmp_path), "s3://bucket/x.tar", good]
    with caplog.at_level(logging.WARNING):
        got, stats = _run(tmp_path, lines)
    assert list(got) == ["good"]
    assert stats.counts["shard_unreadable"] == 4
    messages = " ".join(r.message for r in caplog.records)
    assert "missing.tar" in messages and "noise.tar" in messages and "s3" in messages


@pytest.fixture
def http_root(tmp_path):
    """An HTTP server on localhost serving tmp_path; yields its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_shards_stream_over_http(tmp_path, http_root):
    _shard(tmp_path, GOOD)
    got, stats = _run(tmp_path, [f"{http_root}/s.tar", f"{http_root}/absent.tar"])
    assert list(got) == ["good"]
    assert got["good"][1] == [2, 3, 5, 4]
    assert stats.counts["shard_unreadable"] == 1  # the 404


def test_raw_list_bad_lines(tmp_path, caplog):
    good = tmp_path / "good.wav"
    good.write_bytes(wav_bytes(tone(0.4, 9)))
    lines = ['{"key": "good", "wav": "%s", "txt": "ab"}' % good,
             "not json at all",
             '{"key": "nowav", "txt": "ab"}',
             '{"key": "gone", "wav": "%s", "txt": "ab"}' % (tmp_path / "gone.wav"),
             '{"key": "silent", "wav": "%s", "txt": " "}' % good]
    with caplog.at_level(logging.WARNING):
        got, stats = _run(tmp_path, lines, data_type="raw")
    assert list(got) == ["good"]
    assert stats.counts["bad_list_line"] == 2
    assert stats.counts["audio_decode_error"] == 1
    assert stats.counts["empty_transcript"] == 1
    messages = " ".join(r.message for r in caplog.records)
    assert "data.list:2" in messages and "data.list:3" in messages and "gone" in messages
