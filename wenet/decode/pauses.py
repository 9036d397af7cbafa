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

A pause is at least ``min_pause_s`` long, so the closure of a stop consonant inside a
word is not taken for one. Speech is a window more than ``margin_db`` above the noise
floor, the ``floor_percentile``-th percentile of the utterance's window energies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from wenet.decode.align import WordSpan


@dataclass
class RefineConf:
    """Settings of ``refine_word_spans`` (see the module's docstring)."""

    slack_s: float = 0.08
    margin_db: float = 10.0
    min_pause_s: float = 0.05
    floor_percentile: float = 10.0
    hop_s: float = 0.01


def energy_db(samples: np.ndarray, rate: int, hop_s: float = 0.01) -> np.ndarray:
    """Energy in dB of consecutive non-overlapping windows of ``hop_s`` seconds (a last
    partial window is dropped)."""
    hop = max(1, int(round(rate * hop_s)))
    n = len(samples) // hop
    frames = np.asarray(samples[: n * hop], dtype=np.float64).reshape(n, hop)
    return 10.0 * np.log10((frames ** 2).mean(axis=1) + 1e-20)


def pause_runs(samples: np.ndarray, rate: int, conf: RefineConf = RefineConf()
               ) -> List[Tuple[float, float]]:
    """(start s, end s) of every run of non-speech windows at least ``min_pause_s`` long."""
    energy = energy_db(samples, rate, conf.hop_s)
    if energy.size == 0:
        return []
    quiet = energy <= np.percentile(energy, conf.floor_percentile) + conf.margin_db
    edges = np.diff(np.concatenate([[0], quiet.astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    keep = (ends - starts) * conf.hop_s >= conf.min_pause_s - 1e-9
    return [(s * conf.hop_s, e * conf.hop_s) for s, e in zip(starts[keep], ends[keep])]


def _longest(runs: Sequence[Tuple[float, float]], lo: float, hi: float, after: float
             ) -> Optional[Tuple[float, float]]:
    """The longest run overlapping ``[lo, hi]`` that starts at or after ``after``."""
    inside = [r for r in runs if r[1] > lo and r[0] < hi and r[0] >= after - 1e-9]
    return max(inside, key=lambda r: r[1] - r[0]) if inside else None


def refine_word_spans(words: Sequence[WordSpan], samples: np.ndarray, rate: int,
                      conf: RefineConf = RefineConf()) -> List[WordSpan]:
    """``words`` (CTC spans, in order) with their boundaries moved to the pauses around
    them; words, order and confidences stay. Every word keeps at least one window."""
    if not words:
        return []
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
        out.append(WordSpan(w.word, start, end, w.confidence))
        prev_end = end
    return out
