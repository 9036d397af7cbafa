"""Word boundaries snapped to the pauses of the audio.

A CTC model marks each token with a spike of one or a few frames somewhere in (or just
before) its stretch of speech, at the encoder's frame rate (40-80 ms): good enough to say
*which* word is where, not *when* it starts and ends. Where words are separated by a
pause, the audio says when: the pause is a run of 10 ms windows whose energy stays near
the utterance's noise floor.

``refine_word_spans`` keeps CTC's order and rough place of every word and moves its
boundaries to the pauses around it:

* between words ``i`` and ``i + 1`` it takes the longest inner pause (neither the audio's
  lead-in nor its closing pause) that overlaps the stretch
  from the last spike of ``i`` to the first spike of ``i + 1`` (widened by ``slack_s`` on
  both sides, for spikes that fall just outside their speech); word ``i`` ends where the
  pause begins and word ``i + 1`` starts where it ends;
* the first word starts where the audio's lead-in pause ends, the last word ends where
  its closing pause begins (when the audio starts / ends with one);
* a boundary with no such pause (words spoken without a break) keeps CTC's time.

Before that, ``pause_bias`` lets the audio steer the CTC search itself (``Aligner`` uses
it when ``pause_penalty`` > 0): the forced alignment pays ``pause_penalty`` per encoder
frame of pause (scaled by the share of the frame that is pause) for emitting a token
there, or for being between two tokens of one word there. Pauses are free only before,
between and after words; with ``speech_penalty`` > 0 the search also pays that much per
frame of speech spent outside every word (before the first, between two, after the
last), so that each stretch of speech is claimed by a word and each word boundary seeks a
pause. Where a word holds a pause of its own (a long stop closure) or two words run
together, the two costs are weighed against each other and against the model. A model
that spikes a word early, in the silence before it is spoken (a model trained on fixed
sentence templates predicts them), then has its tokens moved into the next stretch of
speech, and each pause tends to fall between two words, where ``refine_word_spans`` then
finds it.

A pause is at least ``min_pause_s`` long, so the closure of a stop consonant inside a
word is not taken for one. Speech is a window (its mean removed, so that an offset or
rumble does not count) more than ``margin_db`` above the noise floor, the
``floor_percentile``-th percentile of the utterance's window energies; loud blips of at
most ``min_speech_s`` with quiet on both sides (clicks, noise bursts) count as pause; a
pause's edges then yield to the windows beside it that are more than ``edge_margin_db``
above the floor (``pause_runs``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:  # align needs torch; the VAD built on this module does not
    from wenet.alignment.align import WordSpan


@dataclass
class RefineConf:
    """Settings of ``refine_word_spans`` (see the module's docstring)."""

    slack_s: float = 0.08
    margin_db: float = 10.0
    min_pause_s: float = 0.05
    floor_percentile: float = 10.0
    hop_s: float = 0.01
    edge_margin_db: float = 3.0
    pause_penalty: Optional[float] = None   # None: the search's own default (penalties())
    speech_penalty: Optional[float] = None
    min_speech_s: float = 0.03
    floor_window_s: Optional[float] = None  # the floor over this much around each window
    skip_digital_silence: bool = False      # windows of exact zeros do not set the floor

    def penalties(self, transducer: bool = False) -> Tuple[float, float]:
        """(pause_penalty, speech_penalty) for a CTC search or a transducer's lattice: the
        values set, else that search's default (``CTC_PENALTIES`` / ``TRANSDUCER_PENALTIES``)."""
        pause, speech = TRANSDUCER_PENALTIES if transducer else CTC_PENALTIES
        return (pause if self.pause_penalty is None else self.pause_penalty,
                speech if self.speech_penalty is None else self.speech_penalty)


# The search costs by default, (pause, speech) per encoder frame. The two searches weigh
# them against different scores (CTC posteriors; the joint's token and blank scores), and
# bench/alignment_accuracy.py --sweep on the word-chain bench's dev voices wants different
# ones: CTC, over three main-job models, 10 / 2 (91.9-93.5 % of boundaries within 50 ms;
# 20 / 5, the earlier common default: 88.4-90.9 %); the transducer 20 / 5 (97.6 %; 10 / 2:
# 92.2 %). RESULTS.md, "Word times".
CTC_PENALTIES = (10.0, 2.0)
TRANSDUCER_PENALTIES = (20.0, 5.0)


def energy_db(samples: np.ndarray, rate: int, hop_s: float = 0.01,
              remove_dc: bool = True) -> np.ndarray:
    """Energy in dB of consecutive non-overlapping windows of ``hop_s`` seconds (a last
    partial window is dropped). With ``remove_dc`` each window's mean is taken out first:
    an offset or a slow drift (rumble, brown noise) is not speech."""
    hop = max(1, int(round(rate * hop_s)))
    n = len(samples) // hop
    frames = np.asarray(samples[: n * hop], dtype=np.float64).reshape(n, hop)
    if remove_dc:
        frames = frames - frames.mean(axis=1, keepdims=True)
    return 10.0 * np.log10((frames ** 2).mean(axis=1) + 1e-20)


DIGITAL_SILENCE_DB = -150.0  # a 10 ms window this quiet holds (nearly) only zeros


def noise_floor_db(energy: np.ndarray, percentile: float, span: int = 0,
                   skip_digital_silence: bool = False) -> np.ndarray:
    """The noise floor of each window: the ``percentile`` of the window energies, over the
    ``span`` windows centred on it when ``span`` > 0 (a floor that follows the noise level
    along a long recording: joined files, a speaker moving from the microphone), else
    over all of them. With ``skip_digital_silence`` windows of (nearly) exact zeros do
    not count (joins, muted stretches and zero padding would pull the floor down to
    nothing and leave the recording's real, noisy pauses above it); a span of nothing
    but digital silence has the floor of all the windows."""
    values = energy
    if skip_digital_silence:
        values = np.where(energy > DIGITAL_SILENCE_DB, energy, np.nan)
        if np.isnan(values).all():
            values = energy
    overall = float(np.nanpercentile(values, percentile))
    if span <= 0 or span >= len(energy):
        return np.full(len(energy), overall)
    half = span // 2
    padded = np.concatenate([np.full(half, np.nan), values, np.full(span - 1 - half, np.nan)])
    views = np.lib.stride_tricks.sliding_window_view(padded, span)
    floors = np.full(len(energy), overall)
    some = ~np.isnan(views).all(axis=1)
    floors[some] = _row_nanpercentiles(views[some], percentile)
    return floors


def _row_nanpercentiles(rows: np.ndarray, percentile: float) -> np.ndarray:
    """``np.nanpercentile(rows, percentile, axis=1)`` (its linear method, the same
    arithmetic) for rows that each hold a number, all rows at once: numpy falls back to
    one Python-level call per row as soon as any row holds a NaN, which made this the
    cost of segmenting long audio (~40,000 calls for 4 minutes)."""
    ordered = np.sort(rows, axis=1)  # NaNs last
    count = (~np.isnan(rows)).sum(axis=1)
    virtual = (count - 1) * (percentile / 100)
    below = np.floor(virtual).astype(np.int64)
    gamma = virtual - below
    at = np.arange(len(rows))
    a = ordered[at, below]
    b = ordered[at, np.minimum(below + 1, count - 1)]
    diff = b - a
    # numpy's lerp: from the nearer end, so that gamma 0 and 1 give a and b exactly
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)


def pause_runs(samples: np.ndarray, rate: int, conf: RefineConf = RefineConf()
               ) -> List[Tuple[float, float]]:
    """(start s, end s) of every run of non-speech windows at least ``min_pause_s`` long.

    Two thresholds, as in classic endpoint detection: a pause is found where windows stay
    within ``margin_db`` of the noise floor, then its edges give way to the speech on
    either side while the windows there stay above ``edge_margin_db`` (the quiet onsets
    and decaying ends of words lie between the two); a run that would vanish keeps its
    first extent."""
    energy = energy_db(samples, rate, conf.hop_s)
    if energy.size == 0:
        return []
    span = int(round(conf.floor_window_s / conf.hop_s)) if conf.floor_window_s else 0
    floor = noise_floor_db(energy, conf.floor_percentile, span, conf.skip_digital_silence)
    quiet = energy <= floor + conf.margin_db
    if conf.min_speech_s > 0:
        quiet = _bridge_blips(quiet, int(round(conf.min_speech_s / conf.hop_s)))
    edges = np.diff(np.concatenate([[0], quiet.astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    keep = (ends - starts) * conf.hop_s >= conf.min_pause_s - 1e-9
    loud = energy > floor + conf.edge_margin_db
    runs = []
    for start, end in zip(starts[keep], ends[keep]):
        lo, hi = int(start), int(end)
        while lo < hi and loud[lo]:
            lo += 1
        while hi > lo and loud[hi - 1]:
            hi -= 1
        if lo == hi:
            lo, hi = int(start), int(end)
        runs.append((lo * conf.hop_s, hi * conf.hop_s))
    return runs


def _bridge_blips(quiet: np.ndarray, max_windows: int) -> np.ndarray:
    """``quiet`` with every run of at most ``max_windows`` loud windows that has quiet
    windows on both sides turned quiet (a click or a noise burst inside a pause)."""
    out = quiet.copy()
    edges = np.diff(np.concatenate([[1], quiet.astype(np.int8), [1]]))
    for start, end in zip(np.nonzero(edges == -1)[0], np.nonzero(edges == 1)[0]):
        if 0 < start and end < len(quiet) and end - start <= max_windows:
            out[start:end] = True
    return out


def pause_fraction(samples: np.ndarray, rate: int, num_frames: int, frame_shift_s: float,
                   conf: RefineConf = RefineConf(),
                   runs: Optional[List[Tuple[float, float]]] = None) -> np.ndarray:
    """(num_frames,) share of each encoder frame ``[t * frame_shift_s, (t + 1) *
    frame_shift_s)`` that lies in a pause of ``pause_runs`` (audio past the end counts as
    pause); ``runs``: those pauses when already computed."""
    if runs is None:
        runs = pause_runs(samples, rate, conf)
    quiet = np.zeros(num_frames, dtype=np.float64)
    lo = np.arange(num_frames) * frame_shift_s
    hi = lo + frame_shift_s
    for start, end in runs + [(len(samples) / rate, np.inf)]:
        quiet += np.clip(np.minimum(hi, end) - np.maximum(lo, start), 0.0, None)
    return np.clip(quiet / frame_shift_s, 0.0, 1.0)


def pause_bias(pause: np.ndarray, word_starts: Sequence[bool], penalty: float,
               speech_penalty: float = 0.0) -> np.ndarray:
    """(T, 2L + 1) ``state_bias`` for ``align.ctc_forced_align`` over the states ``blank y_1
    blank .. y_L blank``: ``-penalty * pause[t]`` on every token state and on each blank
    between two tokens of one word (``word_starts[j]`` is False for token j, j > 0);
    ``-speech_penalty * (1 - pause[t])`` on the blanks before the first token, after the
    last and between words, so that speech outside every word costs too."""
    num_tokens = len(word_starts)
    in_word = np.zeros(2 * num_tokens + 1, dtype=np.float64)
    in_word[1::2] = 1.0
    for j in range(1, num_tokens):
        in_word[2 * j] = 0.0 if word_starts[j] else 1.0
    return (-penalty * np.outer(pause, in_word)
            - speech_penalty * np.outer(1.0 - pause, 1.0 - in_word))


def _longest(runs: Sequence[Tuple[float, float]], lo: float, hi: float, after: float
             ) -> Optional[Tuple[float, float]]:
    """The longest run overlapping ``[lo, hi]`` that starts at or after ``after``."""
    inside = [r for r in runs if r[1] > lo and r[0] < hi and r[0] >= after - 1e-9]
    return max(inside, key=lambda r: r[1] - r[0]) if inside else None


def refine_word_spans(words: Sequence[WordSpan], samples: np.ndarray, rate: int,
                      conf: RefineConf = RefineConf(),
                      runs: Optional[List[Tuple[float, float]]] = None) -> List[WordSpan]:
    """``words`` (CTC spans, in order) with their boundaries moved to the pauses around
    them; words, order and confidences stay. Every word keeps at least one window.
    ``runs``: ``pause_runs(samples, rate, conf)`` when already computed."""
    if not words:
        return []
    if runs is None:
        runs = pause_runs(samples, rate, conf)
    total = len(samples) / rate
    starts = [w.start_s for w in words]
    ends = [w.end_s for w in words]
    used = 0.0  # pauses are taken left to right, each at most once
    if runs and runs[0][0] <= 1e-9:  # the lead-in ends where the first word starts
        starts[0], used = runs[0][1], runs[0][1]
    inner = [r for r in runs if r[0] > 1e-9 and r[1] < total - conf.hop_s - 1e-9]
    for i in range(len(words) - 1):
        pause = _longest(inner, words[i].end_s - conf.slack_s,
                         words[i + 1].start_s + conf.slack_s, used)
        if pause is not None:
            ends[i], starts[i + 1], used = pause[0], pause[1], pause[1]
    if runs and runs[-1][1] >= total - conf.hop_s - 1e-9 and runs[-1][0] >= used - 1e-9:
        ends[-1] = runs[-1][0]  # the tail begins where the last word ends
    out: List[WordSpan] = []
    prev_end = 0.0
    for w, start, end in zip(words, starts, ends):
        start = max(start, prev_end)
        end = max(end, start + conf.hop_s)
        out.append(replace(w, start_s=start, end_s=end))
        prev_end = end
    return out
