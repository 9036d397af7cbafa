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
from wenet.inference.long_audio import Placed, SegmentedItems, join_results
from wenet.inference.segments import SegmentConf, file_blocks, plan_segment, split_stream
from wenet.inference.recognizer import Hypothesis, Result, TokenTime
from wenet.inference.vad import VadConf

RATE = 16000
HOP = 160  # 10 ms


NOISE = 1e-3  # white noise under everything: the floor the VAD measures


def _plan_audio(rng, total_s, max_gap_s=0.8):
    """Tones (0.3-2 s) and pauses (0.05-``max_gap_s``) in 10 ms steps, over a low noise;
    the audio and the per-window quiet flags."""
    pieces, quiet, n = [], [], 0
    while n < total_s * RATE:
        tone = len(pieces) % 2 == 0
        windows = int(rng.integers(30, 200) if tone else rng.integers(5, int(max_gap_s * 100)))
        t = np.arange(windows * HOP) / RATE
        pieces.append(0.3 * np.sin(2 * np.pi * rng.uniform(150, 900) * t) if tone
                      else np.zeros(windows * HOP))
        quiet += [not tone] * windows
        n += windows * HOP
    audio = np.concatenate(pieces)
    return (audio + NOISE * rng.standard_normal(len(audio))).astype(np.float32), np.array(quiet)


# the cutting rule's tests use one floor for the buffer (the VAD's floor is test_vad's)
VAD = VadConf(floor_window_s=None)


def _conf(**kw):
    return SegmentConf(vad=VAD, **kw)


def _brute_force_plan(quiet, hi_s, conf):
    """The rule of plan_segment from the quiet flags, by enumeration: every whole run of
    quiet windows of the window ``[0, hi)`` at least min_pause_s long; one at 0 is the
    leading silence (the segment begins pad_s before its end); of the others clipped to
    ``[begin + min_segment_s, hi]`` and still min_pause_s long, the first of at least
    cut_pause_s, else the longest (earliest of equals). (begin, end, resume, in pause) in
    samples; None where no pause qualifies (the quietest-window cut)."""
    n = int(round(hi_s * 100))
    q = [bool(x) for x in quiet[:n]]
    count = [0]  # count[k]: quiet windows among the first k
    for x in q:
        count.append(count[-1] + x)
    runs = []
    for i in range(n):
        for j in range(i + 1, n + 1):
            whole = (count[j] - count[i] == j - i and (i == 0 or not q[i - 1])
                     and (j == n or not q[j]))
            if whole and (j - i) / 100 >= conf.vad.min_pause_s - 1e-9:
                runs.append((i / 100, j / 100))
    begin = 0.0
    if runs and runs[0][0] == 0:
        begin = max(0.0, runs[0][1] - conf.pad_s)
        runs = runs[1:]
    lo = begin + conf.min_segment_s
    smp = lambda x: int(round(x * RATE))  # noqa: E731
    if lo >= hi_s:
        if begin > 0:
            return smp(begin), None, smp(begin), True
        lo = hi_s
    clipped = [(max(a, lo), min(b, hi_s)) for a, b in runs]
    clipped = [(a, b) for a, b in clipped if b - a >= conf.vad.min_pause_s - 1e-9]
    first = [(a, b) for a, b in clipped if b - a >= conf.cut_pause_s - 1e-9]
    if first:
        a, b = first[0]
    elif clipped:
        a, b = clipped[0]
        for c, d in clipped[1:]:
            if d - c > b - a + 1e-9:
                a, b = c, d
    else:
        return None
    mid = (a + b) / 2
    return smp(begin), smp(min(a + conf.pad_s, mid)), smp(max(b - conf.pad_s, mid)), True


@pytest.mark.parametrize("seed", range(12))
def test_plan_is_the_brute_force_choice(seed):
    """Buffers starting anywhere (in a tone or a pause) of random tone/pause audio, with
    settings that reach each branch (first long pause, longest short one, none, a
    leading silence too long for a segment after it)."""
    rng = np.random.default_rng(seed)
    audio, quiet = _plan_audio(rng, 12.0, max_gap_s=[0.8, 0.35, 3.0][seed % 3])
    conf = _conf(max_segment_s=8.0, min_segment_s=[1.0, 2.0, 0.5][seed % 3],
                 pad_s=[0.3, 0.1, 0.0][seed % 3], cut_pause_s=[0.3, 0.5, 0.25][seed % 3])
    for offset in rng.integers(0, 300, size=4):
        buf = audio[offset * HOP:]
        hi = min(8.0, (len(buf) // HOP) / 100)
        plan = plan_segment(buf, RATE, hi, conf)
        expected = _brute_force_plan(quiet[offset:], hi, conf)
        if expected is None:
            assert not plan.in_pause and plan.end == plan.resume
        else:
            assert tuple(plan) == expected, (offset, plan, expected)


def test_a_long_leading_silence_is_dropped_before_any_cut():
    """7.5 s of pause, then tones: no segment fits after the speech starts in an 8 s
    window, so the silence but its last pad_s is dropped and the buffer looked at again."""
    rng = np.random.default_rng(5)
    tones, quiet = _plan_audio(rng, 6.0)
    audio = np.concatenate([NOISE * rng.standard_normal(750 * HOP).astype(np.float32), tones])
    quiet = np.concatenate([np.ones(750, dtype=bool), quiet])
    conf = _conf(max_segment_s=8.0, min_segment_s=1.0, pad_s=0.3)
    plan = plan_segment(audio, RATE, 8.0, conf)
    assert tuple(plan) == _brute_force_plan(quiet, 8.0, conf) == (720 * HOP, None, 720 * HOP, True)


def test_without_pause_the_cut_is_the_quietest_window():
    rng = np.random.default_rng(3)
    # 6 s of tone: 40 ms loud, then 20 ms at a random low level (quiet, but too short
    # for a pause), over and over
    levels = np.tile([0.5] * 4 + [0.0] * 2, 100)
    levels[levels == 0] = rng.uniform(0.005, 0.05, 200)
    t = np.arange(600 * HOP) / RATE
    audio = (np.repeat(levels, HOP) * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    plan = plan_segment(audio, RATE, 5.0, _conf(max_segment_s=5.0, min_segment_s=1.0))
    energy = energy_db(audio[:5 * RATE], RATE)
    quietest = 100 + int(np.argmin(energy[100:500]))
    assert plan == (0, quietest * HOP + HOP // 2, quietest * HOP + HOP // 2, False)


@pytest.mark.parametrize("seed", range(4))
def test_segments_keep_all_speech_whatever_the_blocks(seed):
    """The segments are the same whatever the block size; together they hold every tone
    window; what lies between them is pause only, with at least pad_s of it kept on each
    side; every segment but the last is min_segment_s to max_segment_s long."""
    rng = np.random.default_rng(seed)
    audio, quiet = _plan_audio(rng, 40.0, max_gap_s=1.5)
    conf = _conf(max_segment_s=6.0, min_segment_s=1.5, pad_s=0.2)
    whole = list(split_stream([audio], RATE, conf))
    for block in (1000, 16000, 70001):
        blocks = [audio[i:i + block] for i in range(0, len(audio), block)]
        segs = list(split_stream(blocks, RATE, conf))
        assert [(s.start, len(s.samples), s.last) for s in segs] == \
            [(s.start, len(s.samples), s.last) for s in whole]
    for s in whole:
        assert np.array_equal(s.samples, audio[s.start:s.start + len(s.samples)])
    assert [s.last for s in whole] == [False] * (len(whole) - 1) + [True]
    assert whole[-1].total_s == len(audio) / RATE
    assert all(1.5 * RATE <= len(s.samples) <= 6.0 * RATE for s in whole[:-1])
    assert len(whole[-1].samples) >= 1.5 * RATE
    kept = np.zeros(len(quiet), dtype=bool)
    bounds = [0] + [b for s in whole for b in (s.start, s.start + len(s.samples))] + \
        [len(quiet) * HOP]
    for (a, b), keep in zip(zip(bounds, bounds[1:]), [False, True] * len(whole) + [False]):
        assert a <= b
        if keep:
            kept[a // HOP:-(-b // HOP)] = True
        elif b > a:  # dropped: pause windows only, pad_s of the pause kept beside it
            assert quiet[a // HOP:-(-b // HOP)].all()
            if a > 0:
                assert quiet[a // HOP - 20:a // HOP].all()
            if b < len(quiet) * HOP:
                assert quiet[b // HOP:b // HOP + 20].all()
    assert kept[~quiet].all()  # no speech window dropped
    assert (~kept).sum() > 0  # and pauses were


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
    speech = 0
    with sf.SoundFile(path, "w", RATE, 1, subtype="PCM_16") as f:
        for _ in range(seconds // 10):
            audio, quiet = _plan_audio(rng, 10.0, max_gap_s=0.5)
            f.write(audio[:10 * RATE])
            speech += int((~quiet[:10 * RATE // HOP]).sum()) * HOP
    conf = SegmentConf(max_segment_s=4.0, min_segment_s=1.0, block_s=1.0)
    tracemalloc.start()
    try:
        total = 0
        items = SegmentedItems([("long", str(path))], conf)
        for _, (wav, rate) in items:
            total += wav.size(1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # all of the speech decoded, some of the pauses not; the last segment knows the length
    assert speech <= total < seconds * RATE
    assert [p.total_s for p in items.origin.values() if p.last] == [seconds]
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
PAD = 0.3  # seconds of quiet noise around each file's tone


@pytest.fixture(scope="module")
def joined_setup(tmp_path_factory):
    """Five 2 s files (0.3 s of quiet noise, a 1.4 s tone over noise, 0.3 s of quiet noise)
    and their concatenation: its pauses are the 0.6 s joins, and a cut keeps 0.3 s of a
    pause on each side (``pad_s`` at ``max_segment_s`` 3), so its segments are the files."""
    d = tmp_path_factory.mktemp("joined")
    write_experiment(d, tiny_config(), "avg_2.pt", ctc=8.0, eos=1.0)
    rng = np.random.default_rng(0)
    files = []
    for i, key in enumerate(KEYS):
        n = int(1.4 * RATE)
        t = np.arange(n) / RATE
        tone = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        pad = [1e-3 * rng.standard_normal(int(PAD * RATE)) for _ in range(2)]
        files.append(np.concatenate([pad[0], tone, pad[1]]).astype(np.float32))
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
