"""Long audio: cuts against a brute-force choice, segments that tile the recording
whatever the block size, block reading equal to one read, memory bounded by the segment,
times shifted exactly, and a joined recording of a tiny model's files transcribed as the
files are."""
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
import torch

import wenet
from tests.tiny_experiment import tiny_config, write_experiment
from wenet.alignment.align import WordSpan
from wenet.alignment.pauses import energy_db
from wenet.dataset.audio import load_audio, to_mono
from wenet.inference.long_audio import (Placed, SegmentConf, SegmentedItems, choose_cut,
                                        file_blocks, join_results, split_stream)
from wenet.inference.recognizer import Hypothesis, Result, TokenTime
from wenet.inference.vad import VadConf

RATE = 16000
HOP = 160  # 10 ms


def _plan_audio(rng, total_s, max_gap_s=0.8):
    """Tones (0.3-2 s) and digital silences (0.05-``max_gap_s``) in 10 ms steps; the
    audio and the per-window quiet flags."""
    pieces, quiet, n = [], [], 0
    while n < total_s * RATE:
        tone = len(pieces) % 2 == 0
        windows = int(rng.integers(30, 200) if tone else rng.integers(5, int(max_gap_s * 100)))
        t = np.arange(windows * HOP) / RATE
        pieces.append(0.3 * np.sin(2 * np.pi * rng.uniform(150, 900) * t) if tone
                      else np.zeros(windows * HOP))
        quiet += [not tone] * windows
        n += windows * HOP
    return np.concatenate(pieces).astype(np.float32), np.array(quiet)


def _brute_force_cut(quiet, lo_s, hi_s, min_pause_s):
    """Every run of quiet windows, clipped to [lo, hi]: the longest (earliest of equals)
    of at least min_pause_s, cut at its middle; None when there is none."""
    best = None
    n = int(round(hi_s * 100))
    for i in range(n):
        for j in range(i + 1, n + 1):
            if not quiet[i:j].all() or (i > 0 and quiet[i - 1]) or (j < n and quiet[j]):
                continue  # not a whole run of the window
            a, b = max(i / 100, lo_s), min(j / 100, hi_s)
            if b - a >= min_pause_s - 1e-9 and (best is None or b - a > best[1] - best[0] + 1e-9):
                best = (a, b)
    return None if best is None else int(round((best[0] + best[1]) / 2 * RATE))


@pytest.mark.parametrize("seed", range(8))
def test_cut_is_the_brute_force_choice(seed):
    rng = np.random.default_rng(seed)
    audio, quiet = _plan_audio(rng, 9.0)
    lo, hi = 2.0, 8.0
    at, in_pause = choose_cut(audio, RATE, lo, hi)
    expected = _brute_force_cut(quiet, lo, hi, VadConf().min_pause_s)
    if expected is None:
        assert not in_pause
    else:
        assert in_pause and at == expected


def test_without_pause_the_cut_is_the_quietest_window():
    rng = np.random.default_rng(3)
    # 6 s of tone: 40 ms loud, then 20 ms at a random low level (quiet, but too short
    # for a pause), over and over
    levels = np.tile([0.5] * 4 + [0.0] * 2, 100)
    levels[levels == 0] = rng.uniform(0.005, 0.05, 200)
    t = np.arange(600 * HOP) / RATE
    audio = (np.repeat(levels, HOP) * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    at, in_pause = choose_cut(audio, RATE, 1.0, 5.0)
    energy = energy_db(audio[:5 * RATE], RATE)
    quietest = 100 + int(np.argmin(energy[100:500]))
    assert not in_pause and at == (quietest * HOP + HOP // 2)


@pytest.mark.parametrize("seed", range(4))
def test_segments_tile_the_recording_whatever_the_blocks(seed):
    rng = np.random.default_rng(seed)
    audio, _ = _plan_audio(rng, 40.0, max_gap_s=0.5)
    conf = SegmentConf(max_segment_s=6.0, min_segment_s=1.5)
    whole = list(split_stream([audio], RATE, conf))
    for block in (1000, 16000, 70001):
        blocks = [audio[i:i + block] for i in range(0, len(audio), block)]
        segs = list(split_stream(blocks, RATE, conf))
        assert [(s.start, len(s.samples), s.last) for s in segs] == \
            [(s.start, len(s.samples), s.last) for s in whole]
    assert np.array_equal(np.concatenate([s.samples for s in whole]), audio)
    starts = np.cumsum([0] + [len(s.samples) for s in whole[:-1]])
    assert [s.start for s in whole] == starts.tolist()
    assert all(1.5 * RATE <= len(s.samples) <= 6.0 * RATE for s in whole)
    assert [s.last for s in whole] == [False] * (len(whole) - 1) + [True]
    # each cut is the choice over the segment's own longest extent, and near the end
    # leaves at least min_segment_s
    for s, nxt in zip(whole, whole[1:]):
        hi = min(6.0, (len(audio) - s.start) / RATE - 1.5)
        at, _ = choose_cut(audio[s.start:], RATE, 1.5, hi)
        assert s.start + at == nxt.start


def test_block_reading_equals_one_read(tmp_path):
    rng = np.random.default_rng(0)
    stereo = (0.2 * rng.standard_normal((3 * RATE + 17, 2))).astype(np.float32)
    path = tmp_path / "st.wav"
    sf.write(path, stereo, RATE, subtype="PCM_16")
    rate, frames, blocks = file_blocks(str(path), 0.25)
    got = np.concatenate(list(blocks))
    wav, _ = load_audio(str(path))
    assert rate == RATE and frames == len(got)
    np.testing.assert_allclose(got, to_mono(wav)[0].numpy(), rtol=0, atol=1e-7)


def test_memory_is_bounded_by_the_segment_not_the_file(tmp_path):
    seconds = 240
    rng = np.random.default_rng(1)
    path = tmp_path / "long.wav"
    with sf.SoundFile(path, "w", RATE, 1, subtype="PCM_16") as f:
        for _ in range(seconds // 10):
            audio, _ = _plan_audio(rng, 10.0, max_gap_s=0.5)
            f.write(audio[:10 * RATE])
    conf = SegmentConf(max_segment_s=4.0, min_segment_s=1.0, block_s=1.0)
    tracemalloc.start()
    try:
        total = 0
        for _, (wav, rate) in SegmentedItems([("long", str(path))], conf):
            total += wav.size(1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == seconds * RATE
    file_bytes = seconds * RATE * 4  # the file as float32
    # the buffer (max + min + one block of float32) a few times over, far below the file
    assert peak < 8 * (4.0 + 1.0 + 1.0) * RATE * 4 < file_bytes / 3


def _result(key, words, offset=0.0):
    hyp = Hypothesis(" ".join(w for w, _, _ in words), [w for w, _, _ in words],
                     list(range(len(words))), -1.5)
    return Result(key, hyp.text, [hyp], 2.0,
                  [TokenTime(w, a + offset, b + offset, 0.9) for w, a, b in words],
                  [WordSpan(w, a + offset, b + offset, 0.9) for w, a, b in words])


def test_join_shifts_times_by_the_segment_offsets():
    segs = [Placed("rec", 0.0, 0.37, False), Placed("rec", 0.37, 0.9, True)]
    a = [("AB", 0.1, 0.3), ("C", 0.32, 0.35)]
    b = [("D", 0.05, 0.2)]
    out = join_results("rec", [(segs[0], _result("s0", a)), (segs[1], _result("s1", b))])
    expected = _result("rec", a + [(w, s + 0.37, e + 0.37) for w, s, e in b])
    assert out.key == "rec" and out.text == "AB C D"
    assert [(w.word, w.start_s, w.end_s) for w in out.words] == \
        [(w.word, w.start_s, w.end_s) for w in expected.words]
    assert [(t.token, t.start, t.end) for t in out.tokens] == \
        [(t.token, t.start, t.end) for t in expected.tokens]
    assert out.nbest[0].score == -3.0 and out.duration == pytest.approx(0.9)


KEYS = [f"f{i}" for i in range(5)]
PAD = 0.3  # seconds of digital silence around each file's tone


@pytest.fixture(scope="module")
def joined_setup(tmp_path_factory):
    """Five 2 s files (0.3 s silence, a 1.4 s tone over noise, 0.3 s silence) and their
    concatenation: its longest pauses are the 0.6 s joins, whose middles are the files'
    boundaries."""
    d = tmp_path_factory.mktemp("joined")
    write_experiment(d, tiny_config(), "avg_2.pt", ctc=8.0, eos=1.0)
    rng = np.random.default_rng(0)
    files = []
    for i, key in enumerate(KEYS):
        n = int(1.4 * RATE)
        t = np.arange(n) / RATE
        tone = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        pad = np.zeros(int(PAD * RATE))
        files.append(np.concatenate([pad, tone, pad]).astype(np.float32))
        sf.write(d / f"{key}.wav", files[-1], RATE)
    sf.write(d / "joined.wav", np.concatenate(files), RATE)
    return d


def test_joined_recording_transcribed_as_its_files(joined_setup):
    d = joined_setup
    asr = wenet.load_model(str(d), checkpoint=str(d / "avg_2.pt"), batch_size=2,
                           max_segment_s=3.0)
    separate = asr.transcribe([str(d / f"{k}.wav") for k in KEYS], timestamps=True)
    assert [r.key for r in separate] == KEYS and any(r.text for r in separate)
    (long,) = asr.transcribe(str(d / "joined.wav"), timestamps=True)
    assert long.key == "joined"
    assert long.text == " ".join(r.text for r in separate if r.text)
    assert long.nbest[0].token_ids == [i for r in separate for i in r.nbest[0].token_ids]
    expected = [(w.word, w.start_s + 2.0 * i, w.end_s + 2.0 * i)
                for i, r in enumerate(separate) for w in r.words]
    got = [(w.word, w.start_s, w.end_s) for w in long.words]
    assert [w for w, _, _ in got] == [w for w, _, _ in expected]
    np.testing.assert_allclose([t for _, a, b in got for t in (a, b)],
                               [t for _, a, b in expected for t in (a, b)], atol=1e-9)
    assert long.duration == pytest.approx(10.0)
    # off: the file decoded whole (a different, unsegmented result path)
    asr.max_segment_s = 0
    (whole,) = asr.transcribe(str(d / "joined.wav"))
    assert whole.duration == pytest.approx(10.0, abs=0.03)


def test_array_input_is_segmented_too(joined_setup):
    d = joined_setup
    asr = wenet.load_model(str(d), checkpoint=str(d / "avg_2.pt"), batch_size=2,
                           max_segment_s=3.0)
    audio, rate = sf.read(d / "joined.wav", dtype="float32")
    (from_array,) = asr.transcribe(audio, sample_rate=rate)
    (from_file,) = asr.transcribe(str(d / "joined.wav"))
    assert from_array.text == from_file.text and from_array.key == "audio"
