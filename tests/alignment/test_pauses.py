"""Word boundaries snapped to pauses (wenet/alignment/pauses.py), on hand-made signals whose
speech and pauses are known to the sample."""
import math

import numpy as np
import pytest

import torch

from wenet.alignment.align import WordSpan, ctc_forced_align, token_spans, word_spans
from wenet.alignment.pauses import (DIGITAL_SILENCE_DB, RefineConf, energy_db, noise_floor_db, pause_bias,
                                   pause_fraction, pause_runs, refine_word_spans)

RATE = 16000


def _bursts(spans, total_s, level=0.3, floor=1e-3):
    """A constant-level signal: ``level`` inside the (start, end) second spans, ``floor``
    elsewhere (sign alternating sample by sample, so each 10 ms window's energy is exact)."""
    n = int(round(total_s * RATE))
    amp = np.full(n, floor)
    for start, end in spans:
        amp[int(round(start * RATE)): int(round(end * RATE))] = level
    return amp * np.where(np.arange(n) % 2, 1.0, -1.0)


def _times(words):
    return [t for w in words for t in (w.start_s, w.end_s)]


def _flat(pairs):
    return [t for pair in pairs for t in pair]


def test_energy_db_by_hand():
    wav = _bursts([(0.10, 0.20)], 0.305)
    energy = energy_db(wav, RATE)
    assert len(energy) == 30  # the last 5 ms (a partial window) dropped
    assert energy[:10] == pytest.approx([20 * math.log10(1e-3)] * 10, abs=1e-6)
    assert energy[10:20] == pytest.approx([20 * math.log10(0.3)] * 10, abs=1e-6)


def test_pause_runs_are_the_quiet_stretches_of_at_least_min_pause():
    # speech 0.3-0.8, a 40 ms closure, 0.84-1.2, a 300 ms pause, 1.5-2.0, quiet to 2.5
    wav = _bursts([(0.3, 0.8), (0.84, 1.2), (1.5, 2.0)], 2.5)
    assert _flat(pause_runs(wav, RATE, RefineConf(min_pause_s=0.05))) == pytest.approx(
        _flat([(0.0, 0.3), (1.2, 1.5), (2.0, 2.5)]))
    assert _flat(pause_runs(wav, RATE, RefineConf(min_pause_s=0.03))) == pytest.approx(
        _flat([(0.0, 0.3), (0.8, 0.84), (1.2, 1.5), (2.0, 2.5)]))


def test_pause_threshold_is_relative_to_the_noise_floor():
    # a stretch 8 dB over the floor is a pause at margin 10 dB, speech at margin 6 dB
    wav = _bursts([(0.2, 0.6), (1.0, 1.4)], 1.6)
    louder = (np.arange(len(wav)) >= int(0.6 * RATE)) & (np.arange(len(wav)) < int(1.0 * RATE))
    wav[louder] *= 10 ** (8 / 20)
    assert (0.6, 1.0) in [tuple(round(x, 6) for x in r)
                          for r in pause_runs(wav, RATE, RefineConf(margin_db=10.0))]
    assert _flat(pause_runs(wav, RATE, RefineConf(margin_db=6.0))) == pytest.approx(
        _flat([(0.0, 0.2), (1.4, 1.6)]))


def test_boundaries_move_to_the_pauses_between_spikes():
    wav = _bursts([(0.50, 1.00), (1.30, 1.80), (2.20, 2.60)], 3.0)
    # spikes: a inside its word, b just before its speech (early), c late in its word
    words = [WordSpan("a", 0.56, 0.72, 0.5), WordSpan("b", 1.28, 1.44, 0.6),
             WordSpan("c", 2.48, 2.56, 0.7)]
    got = refine_word_spans(words, wav, RATE)
    assert [(w.word, w.confidence) for w in got] == [("a", 0.5), ("b", 0.6), ("c", 0.7)]
    assert _times(got) == pytest.approx(_flat([(0.50, 1.00), (1.30, 1.80), (2.20, 2.60)]))


def test_longest_pause_wins_over_a_closure_and_joined_words_keep_ctc_times():
    # word a has a 60 ms closure (0.70-0.76); a and b are 200 ms apart; b and c are joined
    wav = _bursts([(0.40, 0.70), (0.76, 1.00), (1.20, 1.60), (1.60, 2.00)], 2.4)
    words = [WordSpan("a", 0.48, 0.56, 1.0), WordSpan("b", 1.28, 1.36, 1.0),
             WordSpan("c", 1.68, 1.76, 1.0)]
    got = refine_word_spans(words, wav, RATE, RefineConf(min_pause_s=0.05))
    # a ends at the pause (not at the closure), b/c keep CTC's boundary, c ends at the tail
    assert _times(got) == pytest.approx(_flat([(0.40, 1.00), (1.20, 1.36), (1.68, 2.00)]))


def test_no_lead_in_or_tail_keeps_the_ctc_edges():
    wav = _bursts([(0.0, 0.5), (0.8, 1.2)], 1.2)  # speech from the first to the last sample
    words = [WordSpan("a", 0.08, 0.24, 1.0), WordSpan("b", 0.88, 1.04, 1.0)]
    got = refine_word_spans(words, wav, RATE)
    assert _times(got) == pytest.approx(_flat([(0.08, 0.50), (0.80, 1.04)]))


def test_each_pause_is_used_once_and_words_stay_in_order():
    # three words whose spikes all sit in one pause region: only one boundary takes it
    wav = _bursts([(0.2, 0.6), (1.2, 1.6)], 1.8)
    words = [WordSpan("a", 0.64, 0.72, 1.0), WordSpan("b", 0.80, 0.88, 1.0),
             WordSpan("c", 0.96, 1.04, 1.0)]
    got = refine_word_spans(words, wav, RATE)
    assert got[0].start_s == pytest.approx(0.2) and got[0].end_s == pytest.approx(0.6)
    assert got[1].start_s == pytest.approx(1.2)
    for w, nxt in zip(got, got[1:]):
        assert w.start_s + 0.01 - 1e-9 <= w.end_s <= nxt.start_s + 1e-9
    assert got[2].end_s == pytest.approx(1.6)
    assert refine_word_spans([], wav, RATE) == []


def test_pause_edges_yield_to_quiet_speech_above_the_edge_margin():
    # a word 0.3-0.8 s whose last 60 ms (0.74-0.80) sit only 6 dB above the floor
    wav = _bursts([(0.3, 0.8)], 1.2)
    tail = (np.arange(len(wav)) >= int(0.74 * RATE)) & (np.arange(len(wav)) < int(0.8 * RATE))
    wav[tail] = 1e-3 * 10 ** (6 / 20) * np.sign(wav[tail])
    one = RefineConf(margin_db=10.0, edge_margin_db=10.0)  # a single threshold: tail is pause
    two = RefineConf(margin_db=10.0, edge_margin_db=3.0)   # the tail is speech
    assert _flat(pause_runs(wav, RATE, one)) == pytest.approx(_flat([(0.0, 0.3), (0.74, 1.2)]))
    assert _flat(pause_runs(wav, RATE, two)) == pytest.approx(_flat([(0.0, 0.3), (0.8, 1.2)]))


def test_pause_fraction_by_hand():
    # pauses 0-0.3 s and 1.2-1.5 s (and the last 0.3 s); 80 ms frames
    wav = _bursts([(0.3, 1.2), (1.5, 1.7)], 1.7)
    frac = pause_fraction(wav, RATE, 23, 0.08)  # 23 frames reach 1.84 s, past the audio
    expected = np.zeros(23)
    expected[:3] = 1.0                 # 0.00-0.24 s
    expected[3] = 0.75                 # 0.24-0.32: 60 ms of pause
    expected[15:18] = 1.0              # 1.20-1.44 s
    expected[18] = 0.75                # 1.44-1.52: 60 ms of pause
    expected[21] = 0.75                # 1.68-1.76: 1.70-1.76 is past the end of the audio
    expected[22] = 1.0
    assert frac == pytest.approx(expected)


def test_pause_bias_layout_by_hand():
    # tokens: "▁a" "b" | "▁c": states blank a blank b blank c blank
    bias = pause_bias(np.array([1.0, 0.5, 0.0]), [True, False, True], 4.0)
    per_state = np.array([0, 1, 1, 1, 0, 1, 0], dtype=float)  # word-internal blank = state 2
    assert bias == pytest.approx(-4.0 * np.outer([1.0, 0.5, 0.0], per_state))


def test_pause_penalty_moves_an_early_word_into_its_speech():
    # 80 ms frames over 1.6 s; speech 0.48-0.80 ("a") and 1.12-1.44 ("b"); the model spikes
    # "a" at frame 1, in the lead-in, and "b" inside its speech (frame 16)
    wav = _bursts([(0.48, 0.80), (1.12, 1.44)], 1.6)
    frames, shift = 20, 0.08
    logp = torch.full((frames, 3), -6.0)
    logp[:, 0] = -0.01
    logp[1, 1], logp[1, 0] = -0.01, -6.0
    logp[7, 1] = -3.0                   # a weaker peak for "a" where it is spoken
    logp[16, 2], logp[16, 0] = -0.01, -6.0
    conf = RefineConf(pause_penalty=10.0)
    plain = ctc_forced_align(logp, [1, 2])
    assert plain.index(1) == 1         # CTC alone puts "a" in the silence
    bias = pause_bias(pause_fraction(wav, RATE, frames, shift, conf), [True, True], 10.0)
    steered = ctc_forced_align(logp, [1, 2], state_bias=bias)
    assert steered.index(1) in range(6, 10) and steered.index(2) == 16
    words = word_spans(token_spans(steered, logp), ["\u2581a", "\u2581b"], shift)
    got = refine_word_spans(words, wav, RATE, conf)
    assert _times(got) == pytest.approx(_flat([(0.48, 0.80), (1.12, 1.44)]))


def test_pause_bias_with_speech_penalty_by_hand():
    # tokens "▁a" "b" | "▁c": in-word states 1 2 3 5; between-word blanks 0 4 6
    pause = np.array([1.0, 0.25, 0.0])
    bias = pause_bias(pause, [True, False, True], 4.0, speech_penalty=2.0)
    in_word = np.array([0, 1, 1, 1, 0, 1, 0], dtype=float)
    expected = -4.0 * np.outer(pause, in_word) - 2.0 * np.outer(1.0 - pause, 1.0 - in_word)
    assert bias == pytest.approx(expected)
    assert bias[1] == pytest.approx([-1.5, -1.0, -1.0, -1.0, -1.5, -1.0, -1.5])


def test_energy_ignores_an_offset():
    wav = _bursts([(0.10, 0.20)], 0.3)
    assert energy_db(wav + 0.05, RATE) == pytest.approx(energy_db(wav, RATE), abs=1e-6)
    assert energy_db(wav + 0.05, RATE, remove_dc=False)[0] == pytest.approx(
        10 * math.log10(0.05 ** 2 + 1e-6), abs=1e-6)


def test_short_blips_inside_a_pause_are_bridged():
    # speech 0.3-0.8 and 1.3-1.8; a 20 ms click at 1.0 s and a 60 ms burst at 2.0 s
    wav = _bursts([(0.3, 0.8), (1.0, 1.02), (1.3, 1.8), (2.0, 2.06)], 2.4)
    assert _flat(pause_runs(wav, RATE, RefineConf(min_speech_s=0.0))) == pytest.approx(
        _flat([(0.0, 0.3), (0.8, 1.0), (1.02, 1.3), (1.8, 2.0), (2.06, 2.4)]))
    assert _flat(pause_runs(wav, RATE, RefineConf(min_speech_s=0.03))) == pytest.approx(
        _flat([(0.0, 0.3), (0.8, 1.3), (1.8, 2.0), (2.06, 2.4)]))


def test_speech_penalty_gives_unclaimed_speech_to_a_word():
    # 80 ms frames over 2.0 s; speech 0.32-0.80 ("a") and 1.20-1.68 ("b"); an unsure model
    # (all three labels equally likely) except for confident spikes of both words in the
    # first stretch
    wav = _bursts([(0.32, 0.80), (1.20, 1.68)], 2.0)
    frames, shift = 25, 0.08
    logp = torch.full((frames, 3), -math.log(3.0))
    for frame, label in ((5, 1), (8, 2)):
        logp[frame] = -8.0
        logp[frame, label] = -0.01
    conf = RefineConf(pause_penalty=20.0, speech_penalty=0.0)
    pause = pause_fraction(wav, RATE, frames, shift, conf)
    # the pause penalty alone leaves "b" in the first stretch: no token sits in a pause
    alone = ctc_forced_align(logp, [1, 2], state_bias=pause_bias(pause, [True, True], 20.0))
    assert alone == [0] * 4 + [1] * 2 + [2] * 3 + [0] * 16
    # speech outside every word costs 5 a frame: the second stretch's 6 frames (36.6 with
    # blanks there) outweigh giving up b's spike (8 for a blank at frame 8), so b moves
    both = ctc_forced_align(logp, [1, 2], state_bias=pause_bias(pause, [True, True], 20.0, 5.0))
    assert both == [0] * 4 + [1] * 6 + [0] * 5 + [2] * 6 + [0] * 4  # each word its stretch
    words = word_spans(token_spans(both, logp), ["\u2581a", "\u2581b"], shift)
    got = refine_word_spans(words, wav, RATE, conf)
    assert _times(got) == pytest.approx(_flat([(0.32, 0.80), (1.20, 1.68)]))


@pytest.mark.parametrize("percentile", [0.0, 10.0, 37.5, 50.0, 100.0])
def test_running_floor_equals_numpys_percentile_window_by_window(percentile):
    # the floor is computed for all windows at once; the reference is numpy per window
    rng = np.random.default_rng(3)
    energy = rng.normal(-40.0, 15.0, 700)
    energy[100:160] = DIGITAL_SILENCE_DB - 10  # digital silence: skipped, so NaN in the spans
    energy[400:405] = DIGITAL_SILENCE_DB - 10
    energy[:3] = energy[3]  # ties
    for span in (1, 2, 61, 300):
        floors = noise_floor_db(energy, percentile, span, skip_digital_silence=True)
        values = np.where(energy > DIGITAL_SILENCE_DB, energy, np.nan)
        half = span // 2
        for i in range(len(energy)):
            window = values[max(0, i - half):i - half + span]
            expected = (np.nanpercentile(values, percentile) if np.isnan(window).all()
                        else np.nanpercentile(window, percentile))
            assert floors[i] == expected, (span, i)
