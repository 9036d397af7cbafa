"""The energy VAD on tones and silences of known lengths: pauses and speech where they
were put, at any level and over noise; the streaming VAD's trailing silence likewise."""
import numpy as np
import pytest

from wenet.inference.vad import StreamingVad, VadConf, pauses, speech_segments

RATE = 16000


def _signal(plan, level=0.3, noise=1e-5, seed=0):
    """Concatenated pieces: ("tone", s) or ("sil", s); white noise of ``noise`` over all
    (by default a 16-bit recording's quantisation noise: a VAD has no floor to measure in
    a steady tone between exact zeros, which no microphone records)."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, (kind, secs) in enumerate(plan):
        n = int(round(secs * RATE))
        t = np.arange(n) / RATE
        parts.append(level * np.sin(2 * np.pi * (220 + 90 * i) * t) if kind == "tone"
                     else np.zeros(n))
    x = np.concatenate(parts)
    return x + noise * rng.standard_normal(len(x))


def _bounds(plan, kind):
    out, at = [], 0.0
    for k, secs in plan:
        if k == kind:
            out.append((round(at, 6), round(at + secs, 6)))
        at += secs
    return out


def _flat(pairs):
    return [v for pair in pairs for v in pair]


PLAN = [("sil", 0.5), ("tone", 1.2), ("sil", 0.3), ("tone", 0.8), ("sil", 0.1),
        ("tone", 0.6), ("sil", 0.7)]


@pytest.mark.parametrize("level,noise", [(0.3, 1e-5), (0.003, 1e-5), (0.3, 0.003)])
def test_pauses_and_speech_at_the_known_boundaries(level, noise):
    x = _signal(PLAN, level, noise)
    # the 0.1 s gap is shorter than min_pause_s (0.2 s): part of the speech
    expected = [b for b in _bounds(PLAN, "sil") if b[1] - b[0] >= 0.2]
    assert _flat(pauses(x, RATE)) == pytest.approx(_flat(expected), abs=0.0101)
    speech = speech_segments(x, RATE)
    assert _flat(speech) == pytest.approx(_flat([(0.5, 1.7), (2.0, 3.5)]), abs=0.0101)


def test_min_pause_decides_which_gaps_count():
    x = _signal(PLAN)
    got = pauses(x, RATE, VadConf(min_pause_s=0.05))
    assert _flat(got) == pytest.approx(_flat(_bounds(PLAN, "sil")), abs=0.0101)
    assert len(pauses(x, RATE, VadConf(min_pause_s=0.4))) == 2  # 0.5 s lead-in, 0.7 s tail


def test_digital_silence_does_not_set_the_floor():
    """Noisy pauses beside a join of exact zeros (files concatenated with a gap): all of
    them are pauses; with the zeros counted in one floor for the recording the noisy ones
    are not."""
    plan = [("tone", 1.0), ("sil", 0.5), ("tone", 1.0), ("sil", 0.9), ("tone", 1.0),
            ("sil", 0.6), ("tone", 0.8)]
    x = _signal(plan, 0.3, 0.003)
    # the 0.9 s gap (16 % of the windows: below the 10th percentile) is a digital join
    zero_from, zero_to = int(2.5 * RATE), int(3.4 * RATE)
    x[zero_from:zero_to] = 0.0
    expected = _bounds(plan, "sil")
    assert _flat(pauses(x, RATE)) == pytest.approx(_flat(expected), abs=0.0101)
    counted = pauses(x, RATE, VadConf(skip_digital_silence=False, floor_window_s=None))
    assert _flat(counted) == pytest.approx([2.5, 3.4], abs=0.0101)


def test_floor_follows_a_changing_noise_level():
    """Noise 40 dB louder in the second half (the pauses there 30 dB above the first
    half's floor): a floor over the 3 s around each window finds the pauses of both
    halves; one floor for the whole recording misses the loud half's."""
    half = [("tone", 1.0), ("sil", 0.5), ("tone", 1.2), ("sil", 0.6), ("tone", 0.9),
            ("sil", 0.5), ("tone", 1.0)]
    first = _signal(half, 0.5, 1e-4, seed=1)
    second = _signal(half, 0.5, 1e-2, seed=2)
    x = np.concatenate([first, second])
    shift = len(first) / RATE
    expected = _bounds(half, "sil") + [(a + shift, b + shift) for a, b in _bounds(half, "sil")]
    assert _flat(pauses(x, RATE)) == pytest.approx(_flat(expected), abs=0.0101)
    whole = pauses(x, RATE, VadConf(floor_window_s=None))
    assert _flat(whole) == pytest.approx(_flat(_bounds(half, "sil")), abs=0.0101)


def test_streaming_vad_trailing_silence_any_piece_size():
    """After ``n`` samples the trailing silence is the whole 10 ms windows since the end
    of the last tone (0 inside a tone), whatever the size of the pieces fed."""
    plan = [("sil", 0.4), ("tone", 1.0), ("sil", 0.35), ("tone", 0.5), ("sil", 0.6)]
    x = _signal(plan, noise=0.001)
    tones = _bounds(plan, "tone")

    def reference(n):
        t = (n // 160) * 0.01
        if any(a < t <= b + 1e-9 for a, b in tones):
            return 0.0
        return t - max([b for a, b in tones if b <= t + 1e-9] + [0.0])
    for piece in (37, 160, 4000):
        vad = StreamingVad(RATE)
        for i in range(0, len(x), piece):
            vad.accept(x[i:i + piece])
            n = min(len(x), i + piece)
            assert vad.trailing_silence_s == pytest.approx(reference(n), abs=1e-6), (piece, n)
