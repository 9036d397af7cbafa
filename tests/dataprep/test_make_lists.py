"""Stage 3: tools/make_shard_list.py and tools/make_raw_list.py."""
from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import soundfile as sf
import torch
import torchaudio

import wenet.dataprep.shard_writer as shard_writer
from tests.common import REPO, load_tool

ROOT = REPO
RATE = 16000


def _tool(name):
    return load_tool(name)


def _noise(seed, n):
    return (np.random.default_rng(seed).standard_normal(n) * 3000).clip(-32768, 32767).astype(np.int16)


def _corpus(tmp_path):
    """5 usable utterances (one flac, one through a pipe), one without text, one text without audio."""
    d = tmp_path / "data"
    d.mkdir()
    scp, files = [], {}
    for i in range(6):
        key = f"u{i}"
        ext = "flac" if i == 1 else "wav"
        path = d / f"{key}.{ext}"
        sf.write(str(path), _noise(i, 4000 + 100 * i), RATE, subtype="PCM_16")
        files[key] = path
        scp.append(f"{key} cat {path} |" if i == 3 else f"{key} {path}")
    (d / "wav.scp").write_text("\n".join(scp) + "\n")
    texts = {"u0": "hello world", "u1": "h\u00e9llo w\u00f6rld", "u2": "a b", "u3": "piped one",
             "u4": "four", "zz": "no audio for this"}  # u5 has no transcript
    (d / "text").write_text("".join(f"{k} {v}\n" for k, v in texts.items()), encoding="utf-8")
    return d, files, texts


def _members(path):
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def _make_shards(d, shards, data_list, n, threads=1, extra=()):
    return _tool("make_shard_list").main(
        ["--num_utts_per_shard", str(n), "--nj", str(threads), *extra,
         str(d / "wav.scp"), str(d / "text"), str(shards), str(data_list)])


def test_shards_layout_bytes_and_list(tmp_path, caplog):
    d, files, texts = _corpus(tmp_path)
    shards = tmp_path / "shards"
    assert _make_shards(d, shards, tmp_path / "data.list", 2, threads=2) == 0
    expected_paths = [str(shards / f"shards_{i:09d}.tar") for i in range(3)]  # ceil(5 / 2)
    assert (tmp_path / "data.list").read_text() == "".join(p + "\n" for p in expected_paths)
    assert sorted(os.listdir(shards)) == [os.path.basename(p) for p in expected_paths]
    members = [m for p in expected_paths for m in _members(p)]
    ext = {"u0": "wav", "u1": "flac", "u2": "wav", "u3": "wav", "u4": "wav"}
    assert [name for name, _ in members] == [n for k in ext for n in (f"{k}.txt", f"{k}.{ext[k]}")]
    for (txt_name, txt), (_, audio) in zip(members[0::2], members[1::2]):
        key = txt_name[:-4]
        assert txt == texts[key].encode("utf-8")
        assert audio == files[key].read_bytes()  # stored unchanged, the pipe entry included
    assert "skipped 1 utterances with audio but no transcript" in caplog.text and "u5" in caplog.text
    assert "skipped 1 transcripts with no audio" in caplog.text and "zz" in caplog.text

    # one process gives the same bytes: shards are reproducible
    assert _make_shards(d, tmp_path / "again", tmp_path / "again.list", 2, threads=1) == 0
    for p in expected_paths:
        again = tmp_path / "again" / os.path.basename(p)
        assert again.read_bytes() == open(p, "rb").read()


def test_nj_and_the_wenet_name_num_threads_set_the_process_count(tmp_path):
    d, _, _ = _corpus(tmp_path)
    for option in ("--nj", "--num_threads"):
        tool, seen = _tool("make_shard_list"), []
        tool.make_shards = lambda utts, shards_dir, data_list, per_shard, workers, *rest: seen.append(workers)
        assert tool.main([option, "3", str(d / "wav.scp"), str(d / "text"), str(tmp_path / "s"),
                          str(tmp_path / "data.list")]) == 0
        assert seen == [3], option
    assert _tool("make_shard_list").get_args(["w", "t", "s", "l"]).nj == 1  # default: one process


def test_segments_are_cut_and_stored_as_wav(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    rec = _noise(7, RATE)
    sf.write(str(d / "rec.flac"), rec, RATE, subtype="PCM_16")
    (d / "wav.scp").write_text(f"rec {d / 'rec.flac'}\n")
    cuts = {"rec-a": (0.0, 0.2513), "rec-b": (0.3, 0.55), "rec-c": (0.9, -1)}
    (d / "segments").write_text("".join(f"{k} rec {s} {e}\n" for k, (s, e) in cuts.items()))
    (d / "text").write_text("rec-a one\nrec-b two\nrec-c three\n")
    for rate in (None, 8000):
        out = tmp_path / f"shards{rate}"
        extra = ["--segments", str(d / "segments")] + (["--resample", str(rate)] if rate else [])
        assert _make_shards(d, out, tmp_path / "data.list", 2, extra=extra) == 0
        members = [m for p in sorted(os.listdir(out)) for m in _members(out / p)]
        assert [n for n, _ in members] == [n for k in cuts for n in (f"{k}.txt", f"{k}.wav")]
        for (key, (s, e)), (_, audio) in zip(cuts.items(), members[1::2]):
            stored, stored_rate = sf.read(io.BytesIO(audio), dtype="int16")
            piece = rec[int(round(s * RATE)):(len(rec) if e < 0 else int(round(e * RATE)))]
            if rate is None:
                assert stored_rate == RATE
                np.testing.assert_array_equal(stored, piece)
            else:
                ref = torchaudio.functional.resample(
                    torch.from_numpy(piece.astype(np.float32) / 32768), RATE, rate).numpy()
                assert stored_rate == rate
                np.testing.assert_array_equal(stored, np.clip(np.round(ref * 32768), -32768, 32767))


def test_a_piped_recording_is_read_once_for_all_its_segments(tmp_path):
    # a Switchboard side is a pipe (sph2pipe) and has ~100 segments: run it once, not per segment
    d = tmp_path / "data"
    d.mkdir()
    recs = {name: _noise(seed, RATE) for name, seed in (("ra", 1), ("rb", 2))}
    runs = tmp_path / "runs"
    scp = []
    for name, samples in recs.items():
        sf.write(str(d / f"{name}.wav"), samples, RATE, subtype="PCM_16")
        scp.append(f"{name} sh -c 'echo {name} >> {runs}; cat {d / name}.wav' |\n")
    (d / "wav.scp").write_text("".join(scp))
    cuts = {"ra-1": ("ra", 0.0, 0.25), "ra-2": ("ra", 0.25, 0.6), "ra-3": ("ra", 0.7, -1),
            "rb-1": ("rb", 0.1, 0.3), "rb-2": ("rb", 0.5, 0.9)}
    (d / "segments").write_text("".join(f"{k} {r} {s} {e}\n" for k, (r, s, e) in cuts.items()))
    (d / "text").write_text("".join(f"{k} word\n" for k in cuts))
    out = tmp_path / "shards"
    assert _make_shards(d, out, tmp_path / "data.list", 10, extra=["--segments", str(d / "segments")]) == 0
    assert runs.read_text() == "ra\nrb\n"
    members = _members(out / "shards_000000000.tar")
    assert [n for n, _ in members] == [n for k in cuts for n in (f"{k}.txt", f"{k}.wav")]
    for (r, s, e), (_, audio) in zip(cuts.values(), members[1::2]):
        stored, _ = sf.read(io.BytesIO(audio), dtype="int16")
        samples = recs[r]
        np.testing.assert_array_equal(stored, samples[int(round(s * RATE)):(len(samples) if e < 0
                                                                            else int(round(e * RATE)))])


def test_failed_shard_is_never_listed(tmp_path, monkeypatch):
    d, _, _ = _corpus(tmp_path)
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "shards_000000007.tar.tmp.99999").write_bytes(b"left by a killed run")
    data_list = tmp_path / "data.list"
    data_list.write_text("previous list\n")
    real_add, calls = shard_writer._add_member, []

    def failing_add(tar, name, data):  # the disk fills up in the middle of the second shard
        calls.append(name)
        if len(calls) == 6:
            raise OSError("No space left on device")
        real_add(tar, name, data)

    monkeypatch.setattr(shard_writer, "_add_member", failing_add)
    assert _make_shards(d, shards, data_list, 2, threads=1) != 0
    assert data_list.read_text() == "previous list\n"  # the old list is untouched
    assert sorted(os.listdir(shards)) == ["shards_000000000.tar"]  # no partial, no temp file
    assert [n for n, _ in _members(shards / "shards_000000000.tar")] == ["u0.txt", "u0.wav", "u1.txt", "u1.flac"]

    monkeypatch.setattr(shard_writer, "_add_member", real_add)
    assert _make_shards(d, shards, data_list, 2, threads=1) == 0
    assert len(data_list.read_text().splitlines()) == 3


def test_unreadable_audio_is_skipped_and_counted(tmp_path, caplog):
    d, _, _ = _corpus(tmp_path)
    os.remove(d / "u2.wav")
    (d / "u4.wav").write_bytes(b"garbage, not a wav")
    assert _make_shards(d, tmp_path / "shards", tmp_path / "data.list", 10) == 0
    names = [n for n, _ in _members(tmp_path / "shards" / "shards_000000000.tar")]
    assert names == ["u0.txt", "u0.wav", "u1.txt", "u1.flac", "u3.txt", "u3.wav"]
    assert "skipping utterance u2" in caplog.text and "skipping utterance u4" in caplog.text
    assert "2 of 5 utterances skipped" in caplog.text


def test_shard_whose_audio_all_fails_is_not_written(tmp_path):
    d, _, _ = _corpus(tmp_path)
    os.remove(d / "u2.wav")
    (d / "wav.scp").write_text((d / "wav.scp").read_text().replace(f"cat {d / 'u3.wav'} |", "false |"))
    shards = tmp_path / "shards"
    assert _make_shards(d, shards, tmp_path / "data.list", 2) == 0  # u0 u1 | u2 u3 | u4
    kept = [str(shards / "shards_000000000.tar"), str(shards / "shards_000000002.tar")]
    assert (tmp_path / "data.list").read_text() == "".join(p + "\n" for p in kept)
    assert sorted(os.listdir(shards)) == [os.path.basename(p) for p in kept]  # no temp file either


def test_raw_lists(tmp_path):
    d, files, _ = _corpus(tmp_path)
    out = tmp_path / "data.list"
    assert _tool("make_raw_list").main([str(d / "wav.scp"), str(d / "text"), str(out)]) == 0
    expected = (
        f'{{"key": "u0", "wav": "{files["u0"]}", "txt": "hello world"}}\n'
        f'{{"key": "u1", "wav": "{files["u1"]}", "txt": "h\u00e9llo w\u00f6rld"}}\n'
        f'{{"key": "u2", "wav": "{files["u2"]}", "txt": "a b"}}\n'
        f'{{"key": "u3", "wav": "cat {files["u3"]} |", "txt": "piped one"}}\n'
        f'{{"key": "u4", "wav": "{files["u4"]}", "txt": "four"}}\n')
    assert out.read_text(encoding="utf-8") == expected

    (d / "segments").write_text("s1 u0 0.5 1.25\ns2 u3 0 -1\ns3 missing 0 1\n")
    (d / "text").write_text("s1 first\ns2 second\ns3 third\n")
    assert _tool("make_raw_list").main(["--segments", str(d / "segments"), str(d / "wav.scp"),
                                        str(d / "text"), str(out)]) == 0
    expected = (
        f'{{"key": "s1", "wav": "{files["u0"]}", "txt": "first", "start": 0.5, "end": 1.25}}\n'
        f'{{"key": "s2", "wav": "cat {files["u3"]} |", "txt": "second", "start": 0.0, "end": -1.0}}\n')
    assert out.read_text(encoding="utf-8") == expected
    # the same, as objects, by a reference that pairs the three files itself
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == \
        _reference_segment_list(d)


def _reference_segment_list(d):
    """Raw-list objects of each segment whose recording is in wav.scp and that has text."""
    def kaldi_map(name):
        return dict(line.split(maxsplit=1) for line in (d / name).read_text().splitlines())
    scp, texts = kaldi_map("wav.scp"), kaldi_map("text")
    out = []
    for line in (d / "segments").read_text().splitlines():
        seg, rec, start, end = line.split()
        if rec in scp and seg in texts:
            out.append({"key": seg, "wav": scp[rec], "txt": texts[seg],
                        "start": float(start), "end": float(end)})
    return out


def test_bad_data_dir_names_the_line(tmp_path, caplog):
    d, _, _ = _corpus(tmp_path)
    (d / "segments").write_text("s1 u0 0.5 1.25\ns2 u0 oops 2\n")
    assert _tool("make_raw_list").main(["--segments", str(d / "segments"), str(d / "wav.scp"),
                                        str(d / "text"), str(tmp_path / "data.list")]) == 1
    assert f"{d / 'segments'}:2" in caplog.text
    assert not (tmp_path / "data.list").exists()
