"""One list of audio formats: what tools/make_shard_list.py stores, the shard reader reads.

Each source format is written here with soundfile; the expected member suffix of each
is written by hand. Formats on the list (wav, flac, ogg, opus, mp3, sph where this
libsndfile has them) must be stored byte for byte, other formats libsndfile decodes
re-encoded as WAV with the same samples, and every stored utterance must come out of
the training pipeline with the same features as when read from its file.
"""
from __future__ import annotations

import io
import tarfile

import numpy as np
import soundfile as sf

from tests.common import load_tool
from tests.dataset.test_pipeline import PLAIN, RATE, TABLE, collect, tone
from wenet.dataset.dataset import Dataset

# key: (soundfile format, subtype, file extension, expected member suffix, stored as is)
SOURCES = {
    "uwav": ("WAV", "PCM_16", "wav", "wav", True),
    "uflac": ("FLAC", "PCM_16", "flac", "flac", True),
    "uogg": ("OGG", "VORBIS", "ogg", "ogg", True),
    "uopus": ("OGG", "OPUS", "opus", "opus", True),
    "ump3": ("MP3", "MPEG_LAYER_III", "mp3", "mp3", True),
    "usph": ("NIST", "PCM_16", "sph", "sph", True),
    "uaiff": ("AIFF", "PCM_16", "aiff", "wav", False),
    "ucaf": ("CAF", "ALAC_16", "caf", "wav", False),
    "uw64": ("W64", "PCM_24", "w64", "wav", False),
    "uau": ("AU", "ULAW", "au", "wav", False),
}
TEXTS = ["ab", "ba c", "cab", "abc", "ca", "a b", "bc", "c a b", "ac", "b"]


def _write_sources(d):
    """The SOURCES soundfile can write here, plus an m4a libsndfile cannot read → {key: path}."""
    paths = {}
    for i, (key, (fmt, subtype, ext, _, _)) in enumerate(SOURCES.items()):
        path = d / f"{key}.{ext}"
        try:
            sf.write(str(path), tone(0.5, i), RATE, format=fmt, subtype=subtype)
        except (sf.LibsndfileError, ValueError, TypeError):  # not in this libsndfile build
            assert key not in ("uwav", "uflac", "uogg"), key
            continue
        paths[key] = path
    paths["um4a"] = d / "um4a.m4a"
    paths["um4a"].write_bytes(b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00" + bytes(200))
    return paths


def _data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    paths = _write_sources(d)
    keys = sorted(paths)
    (d / "wav.scp").write_text("".join(f"{k} {paths[k]}\n" for k in keys))
    (d / "text").write_text("".join(f"{k} {TEXTS[i % len(TEXTS)]}\n" for i, k in enumerate(keys)))
    return d, paths


def _features(data_type, data_list):
    ds = Dataset(data_type, str(data_list), TABLE, PLAIN)
    return collect(ds), ds.last_stats


def test_shards_hold_only_listed_formats_and_the_pipeline_reads_them_all(tmp_path, caplog):
    d, paths = _data_dir(tmp_path)
    shards, shard_list = tmp_path / "shards", tmp_path / "shard.list"
    assert load_tool("make_shard_list").main(
        [str(d / "wav.scp"), str(d / "text"), str(shards), str(shard_list)]) == 0
    assert (f"skipping utterance um4a: cannot read audio header of {paths['um4a']}: not audio "
            "libsndfile decodes") in caplog.text
    with tarfile.open(shards / "shards_000000000.tar") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    stored = sorted(k for k in paths if k != "um4a")
    assert [name for name, _ in members[1::2]] == [f"{k}.{SOURCES[k][3]}" for k in stored]
    for key, (_, audio) in zip(stored, members[1::2]):
        if SOURCES[key][4]:
            assert audio == paths[key].read_bytes(), key
        else:  # re-encoded: a WAV with the very same samples and rate
            assert sf.info(io.BytesIO(audio)).format == "WAV", key
            got, rate = sf.read(io.BytesIO(audio), dtype="float64")
            want, want_rate = sf.read(str(paths[key]), dtype="float64")
            assert rate == want_rate
            np.testing.assert_array_equal(got, want, err_msg=key)

    # the training pipeline delivers every stored utterance, as read from its file
    raw_list = tmp_path / "raw.list"
    assert load_tool("make_raw_list").main([str(d / "wav.scp"), str(d / "text"), str(raw_list)]) == 0
    from_shards, shard_stats = _features("shard", shard_list)
    from_files, raw_stats = _features("raw", raw_list)
    assert sorted(from_shards) == stored
    assert dict(shard_stats.counts) == {}
    assert sorted(from_files) == stored and dict(raw_stats.counts) == {"audio_decode_error": 1}
    for key in stored:
        assert from_shards[key][1] == from_files[key][1], key
        assert from_shards[key][0].shape == from_files[key][0].shape, key
        assert np.array_equal(from_shards[key][0].numpy(), from_files[key][0].numpy()), key
