"""wenet/alignment/timing.py and rnnt.py on hand-built alignments: the encoder offset,
the minimum word duration (against the invariants it promises, on random words), tokens
inside their words, refinement into a known pause of a synthetic signal (CTC and
transducer searches), the steered transducer search against brute force."""
import itertools
import math
import random

import numpy as np
import pytest
import torch

from wenet.alignment.align import TokenSpan, WordSpan
from wenet.alignment import timing
from wenet.alignment.pauses import CTC_PENALTIES, TRANSDUCER_PENALTIES, RefineConf
from wenet.alignment.rnnt import rnnt_steered_path
from wenet.alignment.timing import (FrameGeometry, align_and_time, enforce_min_duration,
                                    frame_offset_seconds, time_tokens)

RATE = 16000


def test_frame_offset_centres_the_frame_on_its_input():
    # conv2d (4x, right context 6): frame f reads fbank frames 4f..4f+6, i.e. samples of
    # [40f, 40f + 60 + 25) ms, centred at 40f + 42.5 ms; [f, f + 1) x 40 ms is centred
    # at 40f + 20 ms
    assert frame_offset_seconds(4, 6, 10, 25) == pytest.approx(0.0225)
    # conv2d8 (8x, right context 14): 8f..8f+14 -> centre 80f + 82.5, interval 80f + 40
    assert frame_offset_seconds(8, 14, 10, 25) == pytest.approx(0.0425)
    # the Zipformer front end with output downsampling 2 (4x, right context 10)
    assert frame_offset_seconds(4, 10, 10, 25) == pytest.approx(0.0425)


def test_frame_times_carry_the_offset():
    spans = [TokenSpan(3, 5, 6, 0.9), TokenSpan(4, 6, 8, 0.7), TokenSpan(5, 12, 13, 0.5)]
    timing = time_tokens(spans, ["\u2581ab", "c", "\u2581d"], FrameGeometry(0.04, 0.0225),
                         min_word_s=0.0, duration_s=2.0)
    assert [(w.word, w.start_s, w.end_s) for w in timing.words] == [
        ("abc", pytest.approx(0.2225), pytest.approx(0.3425)),
        ("d", pytest.approx(0.5025), pytest.approx(0.5425))]
    assert timing.words[0].confidence == pytest.approx(0.8)
    assert [t[:2] for t in timing.tokens] == [
        (pytest.approx(0.2225), pytest.approx(0.2625)),
        (pytest.approx(0.2625), pytest.approx(0.3425)),
        (pytest.approx(0.5025), pytest.approx(0.5425))]
    assert timing.word_tokens == [[0, 1], [2]]


def test_the_issue_case_words_grow_into_speech_not_into_the_lead_in():
    # refinement put THE and DATE into 10 ms each at 0.20 s, where the lead-in pause ends
    # (issue 35): they grow into the speech after it, not back into the pause
    words = [WordSpan("THE", 0.20, 0.21, 1.0), WordSpan("DATE", 0.21, 0.22, 1.0),
             WordSpan("IS", 0.40, 0.60, 1.0)]
    out = enforce_min_duration(words, 0.05, 1.0, pauses=[(0.0, 0.20), (0.70, 1.0)])
    # THE: no free speech on either side -> the forward pass pushes DATE: 0.20..0.25;
    # DATE: from 0.25 (0 free on its left, THE) 0.18 s of speech on its right -> 0.25..0.30
    assert [(w.start_s, w.end_s) for w in out] == [
        (pytest.approx(0.20), pytest.approx(0.25)), (pytest.approx(0.25), pytest.approx(0.30)),
        (0.40, 0.60)]


def test_without_pauses_free_time_on_both_sides_is_used():
    words = [WordSpan("THE", 0.20, 0.21, 1.0), WordSpan("DATE", 0.21, 0.22, 1.0),
             WordSpan("IS", 0.40, 0.60, 1.0)]
    out = enforce_min_duration(words, 0.05, 1.0)
    # THE: 40 ms short, no room on its right -> all from the left: 0.16..0.21;
    # DATE: 40 ms short, 20 ms each side would eat THE -> 0 left, 40 ms right
    assert [(w.start_s, w.end_s) for w in out] == [
        (pytest.approx(0.16), pytest.approx(0.21)), (pytest.approx(0.21), pytest.approx(0.26)),
        (0.40, 0.60)]


def test_a_short_word_between_touching_words_takes_from_them():
    words = [WordSpan("a", 0.0, 0.30, 1.0), WordSpan("b", 0.30, 0.31, 1.0),
             WordSpan("c", 0.31, 0.50, 1.0)]
    out = enforce_min_duration(words, 0.05, 0.5)
    assert out[1].end_s - out[1].start_s == pytest.approx(0.05)
    assert out[0].start_s == 0.0 and out[2].end_s == 0.5
    assert out[0].end_s == pytest.approx(out[1].start_s)
    assert out[1].end_s == pytest.approx(out[2].start_s)


def test_min_duration_invariants_on_random_words():
    rng = random.Random(3)
    for _ in range(500):
        n = rng.randint(1, 8)
        duration = rng.uniform(0.05, 2.0)
        cuts = sorted(rng.uniform(0, duration) for _ in range(2 * n))
        if rng.random() < 0.3:  # some words collapsed onto one instant
            cuts = [min(round(c, 1), duration) for c in cuts]
        words = [WordSpan(str(i), cuts[2 * i], cuts[2 * i + 1], 1.0) for i in range(n)]
        m = 0.05
        pauses = None
        if rng.random() < 0.5:
            edges = sorted(rng.uniform(0, duration) for _ in range(4))
            pauses = [(edges[0], edges[1]), (edges[2], edges[3])]
        out = enforce_min_duration(words, m, duration, pauses)
        need = min(m, duration / n)
        assert [w.word for w in out] == [w.word for w in words]
        for i, w in enumerate(out):
            assert w.end_s - w.start_s >= need - 1e-9
            assert 0.0 <= w.start_s and w.end_s <= duration + 1e-9
            if i:
                assert out[i - 1].end_s <= w.start_s + 1e-9
        # a word already long enough with at least the minimum of room on both sides,
        # and neighbours long enough too, keeps its times
        for i, w in enumerate(words):
            room = all(x.end_s - x.start_s >= m for x in words) and \
                (i == 0 or words[i - 1].end_s <= w.start_s) and \
                (i == n - 1 or w.end_s <= words[i + 1].start_s)
            if room:
                assert (out[i].start_s, out[i].end_s) == pytest.approx((w.start_s, w.end_s))


def test_tokens_are_rescaled_into_their_refined_word():
    # word "abc" at frames 5..8 (0.20..0.32 s); the audio's pause edges put it at
    # 0.25..0.55; its tokens keep their shares (1 frame of 3, 2 of 3)
    rate = RATE
    t = np.arange(int(0.8 * rate)) / rate
    wav = 1e-4 * np.random.default_rng(0).standard_normal(t.size)
    wav[int(0.25 * rate):int(0.55 * rate)] += 0.3 * np.sin(2 * np.pi * 300 * t[:int(0.3 * rate)])
    spans = [TokenSpan(3, 5, 6, 0.9), TokenSpan(4, 6, 8, 0.9)]
    timing = time_tokens(spans, ["\u2581ab", "c"], FrameGeometry(0.04), wav, rate,
                         RefineConf(), min_word_s=0.05)
    (word,) = timing.words
    assert (word.start_s, word.end_s) == (pytest.approx(0.25), pytest.approx(0.55))
    (a0, a1, _), (b0, b1, _) = timing.tokens
    assert (a0, a1, b0, b1) == pytest.approx((0.25, 0.35, 0.35, 0.55))


def test_a_space_unit_fills_the_gap_between_words():
    spans = [TokenSpan(3, 2, 3, 1.0), TokenSpan(2, 5, 6, 1.0), TokenSpan(4, 8, 9, 1.0)]
    timing = time_tokens(spans, ["a", "\u2581", "b"], FrameGeometry(0.1), min_word_s=0.0,
                         duration_s=1.0)
    assert [(w.word, w.start_s, w.end_s) for w in timing.words] == [
        ("a", pytest.approx(0.2), pytest.approx(0.3)), ("b", pytest.approx(0.8),
                                                        pytest.approx(0.9))]
    assert timing.tokens[1] == (pytest.approx(0.3), pytest.approx(0.8), "\u2581")


def _two_bursts():
    """0.3 s pause, word 1 at 0.30-0.60 s, pause 0.60-0.95 s, word 2 at 0.95-1.25 s, 0.35 s
    of pause; faint noise throughout."""
    n = int(1.6 * RATE)
    wav = 1e-3 * np.random.default_rng(1).standard_normal(n)
    for a, b, f in ((0.30, 0.60, 220), (0.95, 1.25, 330)):
        k = np.arange(int((b - a) * RATE))
        wav[int(a * RATE):int(a * RATE) + k.size] += 0.3 * np.sin(2 * np.pi * f * k / RATE)
    return wav


@pytest.mark.parametrize("search", ["ctc", "transducer"])
def test_refinement_puts_the_boundaries_on_the_known_pauses(search):
    """Scores that say nothing (uniform): the audio alone places the two words."""
    wav = _two_bursts()
    shift = 0.04
    frames = math.ceil(len(wav) / RATE / shift)
    units = ["\u2581a", "\u2581b"]
    geometry = FrameGeometry(shift)
    if search == "ctc":
        frames_of = {"log_probs": torch.full((frames, 3), -math.log(3))}
    else:
        frames_of = {"model": _UniformTransducer(), "encoder_out": torch.zeros(frames, 2)}
    _, _, timing = align_and_time([1, 2], units, geometry, samples=wav, rate=RATE,
                                  refine=RefineConf(), **frames_of)
    got = [(w.start_s, w.end_s) for w in timing.words]
    assert got == [pytest.approx((0.30, 0.60), abs=0.02), pytest.approx((0.95, 1.25), abs=0.02)]
    # without the audio the same scores put both words at the start
    _, _, plain = align_and_time([1, 2], units, geometry, **frames_of)
    assert plain.words[1].end_s < 0.3


@pytest.mark.parametrize("search", ["ctc", "transducer"])
@pytest.mark.parametrize("given", [(None, None), (3.0, None), (None, 0.5), (7.0, 1.5)])
def test_each_search_gets_its_default_penalties_unless_given(monkeypatch, search, given):
    """RefineConf's penalties left None take the search's defaults (CTC 10 / 2, transducer
    20 / 5, chosen on the word-chain bench); values set are used by both searches."""
    assert RefineConf().penalties() == CTC_PENALTIES == (10.0, 2.0)
    assert RefineConf().penalties(transducer=True) == TRANSDUCER_PENALTIES == (20.0, 5.0)
    seen = []
    real_bias, real_spans = timing.pause_bias, timing.transducer_token_spans
    monkeypatch.setattr(timing, "pause_bias", lambda pause, starts, pen, speech:
                        seen.append((pen, speech)) or real_bias(pause, starts, pen, speech))
    monkeypatch.setattr(timing, "transducer_token_spans",
                        lambda m, e, ids, pause, starts, pen, speech:
                        seen.append((pen, speech)) or real_spans(m, e, ids, pause, starts, pen,
                                                                 speech))
    wav, shift = _two_bursts(), 0.04
    frames = math.ceil(len(wav) / RATE / shift)
    frames_of = {"log_probs": torch.full((frames, 3), -math.log(3))} if search == "ctc" else \
        {"model": _UniformTransducer(), "encoder_out": torch.zeros(frames, 2)}
    conf = RefineConf(pause_penalty=given[0], speech_penalty=given[1])
    align_and_time([1, 2], ["\u2581a", "\u2581b"], FrameGeometry(shift), samples=wav,
                   rate=RATE, refine=conf, **frames_of)
    default = CTC_PENALTIES if search == "ctc" else TRANSDUCER_PENALTIES
    assert seen == [(default[0] if given[0] is None else given[0],
                     default[1] if given[1] is None else given[1])]


class _UniformTransducer:
    """Joint logits that are all equal: every token and blank equally likely anywhere."""

    def blank_symbol(self):
        return 0

    def predictor_init_state(self, batch):
        return []

    def forward_predictor_step(self, tokens, state):
        return torch.zeros(tokens.size(0), 2), state

    def project_encoder(self, enc):
        return enc

    def forward_joint_step(self, enc, pred):
        return torch.zeros(enc.size(0), 3)


def _path_score(lp, tokens, starts, pause, pen, speech, frames, out_at):
    """The steered score of one path, frame by frame as rnnt.py's docstring says."""
    T, U = lp.shape[0], len(tokens)
    word_of = np.cumsum(starts) - 1
    score, u = 0.0, 0
    for t in range(T):
        while u < U and frames[u] == t:
            score += lp[t, u, tokens[u]] - pen * pause[t]
            u += 1
        w = word_of[u - 1] if u else None
        out = w is None or (out_at[w] >= 0 and t >= out_at[w])
        score += lp[t, u, 0] - (speech * (1 - pause[t]) if out else pen * pause[t])
    return score


def _brute_force_score(lp, tokens, starts, pause, pen, speech):
    """Every path: emitting frames, and for each word no step out or one on a frame from
    its last token's on."""
    T, U = lp.shape[0], len(tokens)
    word_of = np.cumsum(starts) - 1
    words = int(word_of[-1]) + 1
    best = -np.inf
    for frames in itertools.combinations_with_replacement(range(T), U):
        last = [max(frames[u] for u in range(U) if word_of[u] == w) for w in range(words)]
        for out_at in itertools.product(*[[-1] + list(range(last[w], T))
                                          for w in range(words)]):
            best = max(best, _path_score(lp, tokens, starts, pause, pen, speech, frames,
                                         out_at))
    return best


def test_steered_transducer_search_equals_brute_force():
    """The best in/out path (rnnt.py's docstring) has the best score of all paths."""
    gen = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(2)
    for T, tokens, starts in [(4, [1, 2], [True, False]), (5, [3, 1, 2], [True, True, False]),
                              (5, [2, 2, 1, 3], [True, False, True, False]),
                              (4, [1, 2, 3], [True, True, True])]:
        for _ in range(3):
            lp = torch.log_softmax(2 * torch.randn(T, len(tokens) + 1, 4, generator=gen), -1)
            pause = rng.uniform(0, 1, T).round(1)
            frames, out_at, score = rnnt_steered_path(lp, tokens, 0, pause, starts, 3.0, 1.5)
            lpn = lp.double().numpy()
            assert score == pytest.approx(_path_score(lpn, tokens, starts, pause, 3.0, 1.5,
                                                      frames, out_at))
            assert score == pytest.approx(_brute_force_score(lpn, tokens, starts, pause,
                                                             3.0, 1.5))
