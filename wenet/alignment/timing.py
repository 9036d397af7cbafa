"""Word and token times from a frame alignment: the one place that turns aligned frames
into the times that every output (``transcribe.py --timestamps``, its CTM / SRT / JSON,
``alignment.py``'s word, token, CTM and TextGrid files, ``recognize.py``'s CTM, the
Python API) reports.

Input: one ``TokenSpan`` per token of the transcript, in encoder frames (a CTC path's
runs, ``align.token_spans``; a transducer's emitting frames, ``rnnt.transducer_token_spans``),
the units, and the frame geometry. Steps:

1. Frames to seconds, with the encoder's offset corrected (``frame_offset_seconds``):
   frame ``f`` covers ``[f, f + 1) * frame_shift_s + offset_s``, where the offset puts the
   middle of that interval on the middle of the audio the frame was computed from (its
   fbank windows: ``right_context`` input frames of lookahead, a 25 ms window). Without it
   every time is early by ~20-40 ms.
2. Tokens grouped into words (``align.word_groups``).
3. With the audio (``samples``, ``rate``) and a ``RefineConf``: word boundaries moved to
   the pauses around the words (``pauses.refine_word_spans``). CTC puts a spike somewhere
   in (or before) its word; the audio says when the word starts and ends.
4. Every word made at least ``min_word_s`` long (``enforce_min_duration``): a word squeezed
   shorter (refinement can leave a word that CTC put in a pause with almost nothing) is
   widened into the free time beside it that is not a known pause, then at its
   neighbours' cost, never overlapping them and never below their own minimum.
5. Tokens rescaled into their word (``tokens_in_words``): each token keeps its share of
   the word's frame-time interval, so the token tier of a TextGrid lies inside the word
   tier. A unit that belongs to no word (a char model's lone ``▁``) gets the gap between
   its neighbours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

import torch

from wenet.alignment.align import (TokenSpan, WordSpan, ctc_forced_align, starts_word,
                                   token_spans, word_groups)
from wenet.alignment.pauses import (RefineConf, pause_bias, pause_fraction, pause_runs,
                                    refine_word_spans)
from wenet.alignment.rnnt import transducer_token_spans

Interval = Tuple[float, float, str]  # (start s, end s, unit)

MIN_WORD_S = 0.05


@dataclass
class FrameGeometry:
    """Where encoder frames lie in the audio: ``frame_shift_s`` seconds apart, frame ``f``
    covering ``[f, f + 1) * frame_shift_s + offset_s``."""

    frame_shift_s: float
    offset_s: float = 0.0

    def seconds(self, frame: float) -> float:
        return frame * self.frame_shift_s + self.offset_s


def frame_offset_seconds(subsampling_rate: int, right_context: int, fbank_shift_ms: float,
                         fbank_length_ms: float) -> float:
    """The offset that centres encoder frame ``f``'s interval ``[f, f + 1) * shift`` on the
    audio it was computed from: input frames ``f * subsampling_rate`` to ``f *
    subsampling_rate + right_context``, fbank frame ``i`` reading ``[i * shift_ms, i *
    shift_ms + length_ms)``. E.g. 4x conv2d subsampling (right context 6, 10 ms / 25 ms
    fbank): 6 * 5 + 12.5 - 20 = 22.5 ms."""
    centre_ms = right_context * fbank_shift_ms / 2.0 + fbank_length_ms / 2.0
    return (centre_ms - subsampling_rate * fbank_shift_ms / 2.0) / 1000.0


def model_geometry(model, fbank_shift_ms: float, fbank_length_ms: float) -> FrameGeometry:
    """``FrameGeometry`` of a model with ``subsampling_rate()`` and ``right_context()``
    (an ``ASRModel``, a ``TransducerModel``, an exported ``final.zip``)."""
    rate, right = int(model.subsampling_rate()), int(model.right_context())
    return FrameGeometry(rate * fbank_shift_ms / 1000.0,
                         frame_offset_seconds(rate, right, fbank_shift_ms, fbank_length_ms))


@dataclass
class Timing:
    """Words and tokens of one utterance in seconds (``tokens[i]`` is token ``i``'s
    ``(start, end, unit)``; ``word_tokens[j]`` the indices of word ``j``'s tokens)."""

    words: List[WordSpan]
    tokens: List[Interval]
    word_tokens: List[List[int]]


def time_tokens(spans: Sequence[TokenSpan], units: Sequence[str], geometry: FrameGeometry,
                samples: Optional[np.ndarray] = None, rate: int = 0,
                refine: Optional[RefineConf] = None, min_word_s: float = MIN_WORD_S,
                runs: Optional[List[Tuple[float, float]]] = None,
                duration_s: Optional[float] = None) -> Timing:
    """The times of ``spans`` (one per unit of ``units``), steps 1-5 of the module's
    docstring. Refinement runs when ``refine`` and ``samples`` are given (``runs``: the
    pauses when already found). ``duration_s``: the audio's length (default: the samples',
    else the last frame's end); no time lies past it."""
    if len(spans) != len(units):
        raise ValueError(f"{len(spans)} spans but {len(units)} units")
    raw = [(geometry.seconds(s.start), geometry.seconds(s.end)) for s in spans]
    if duration_s is None:
        duration_s = (len(samples) / rate if samples is not None and rate
                      else max([e for _, e in raw], default=0.0))
    raw = [(min(max(0.0, a), duration_s), min(max(0.0, b), duration_s)) for a, b in raw]
    groups = word_groups(units)
    words = []
    for group in groups:
        word = "".join(units[i].replace("\u2581", "") for i in group)
        conf = sum(spans[i].score for i in group) / len(group)
        words.append(WordSpan(word, raw[group[0]][0], raw[group[-1]][1], conf))
    frame_words = list(words)
    if refine is not None and samples is not None:
        if runs is None:
            runs = pause_runs(samples, rate, refine)
        words = refine_word_spans(words, samples, rate, refine, runs)
    else:
        runs = None
    words = enforce_min_duration(words, min_word_s, duration_s, runs)
    return Timing(words, tokens_in_words(raw, units, groups, frame_words, words), groups)


def align_and_time(ids: Sequence[int], units: Sequence[str], geometry: FrameGeometry, *,
                   log_probs: Optional[torch.Tensor] = None, model=None,
                   encoder_out: Optional[torch.Tensor] = None,
                   samples: Optional[np.ndarray] = None, rate: int = 0,
                   refine: Optional[RefineConf] = None, blank_id: int = 0,
                   min_word_s: float = MIN_WORD_S, duration_s: Optional[float] = None
                   ) -> Tuple[List[int], List[TokenSpan], Timing]:
    """Forced alignment of ``ids`` and its times: with ``log_probs`` (T, V) the CTC search
    (``align.ctc_forced_align``), else the transducer ``model``'s lattice over
    ``encoder_out`` (T, D) (``rnnt.transducer_token_spans``). With ``samples`` and
    ``refine`` the audio's pauses steer the search (``refine.penalties``, whose defaults
    differ for the two searches) and then the word boundaries (``time_tokens``). Returns the CTC
    frame path (empty for a transducer), the token spans and the ``Timing``. Raises
    ``align.AlignmentError`` when the transcript cannot be aligned."""
    num_frames = log_probs.size(0) if log_probs is not None else encoder_out.size(0)
    runs = pause = None
    pause_penalty, speech_penalty = (refine or RefineConf()).penalties(log_probs is None)
    if refine is not None and samples is not None:  # pauses found once for search and snap
        samples = np.asarray(samples, dtype=np.float64)
        runs = pause_runs(samples, rate, refine)
        if pause_penalty > 0 or speech_penalty > 0:
            pause = pause_fraction(samples, rate, num_frames, geometry.frame_shift_s, refine,
                                   runs)
    else:
        refine = None
    word_starts = [starts_word(u) for u in units]
    if log_probs is not None:
        bias = None if pause is None else pause_bias(pause, word_starts, pause_penalty,
                                                     speech_penalty)
        path = ctc_forced_align(log_probs, ids, blank_id, bias)
        spans = token_spans(path, log_probs, blank_id)
    else:
        path = []
        spans = transducer_token_spans(model, encoder_out[None], ids, pause, word_starts,
                                       pause_penalty if refine else 0.0,
                                       speech_penalty if refine else 0.0)
    timing = time_tokens(spans, units, geometry, samples, rate, refine, min_word_s, runs,
                         duration_s)
    return path, spans, timing


def enforce_min_duration(words: Sequence[WordSpan], min_s: float, duration_s: float,
                         pauses: Optional[Sequence[Tuple[float, float]]] = None
                         ) -> List[WordSpan]:
    """``words`` (in order) with none shorter than ``min_s`` (or than ``duration_s /
    len(words)`` when they cannot all have ``min_s``), none overlapping the next and all
    inside ``[0, duration_s]``. A short word first grows into the free time beside it
    (evenly where it can), but not into a known pause (``pauses``: (start, end) seconds,
    the audio's, ``pauses.pause_runs``): a refined word that starts where a pause ends
    grows into the speech after it. What is still missing it takes from its neighbours,
    which keep their own minimum, and only then from pauses. Words long enough, with room
    around them, keep their times."""
    n = len(words)
    if n == 0:
        return []
    duration_s = max(duration_s, max(w.end_s for w in words))
    min_s = min(min_s, duration_s / n)
    starts = np.clip([w.start_s for w in words], 0.0, duration_s)
    ends = np.clip([w.end_s for w in words], 0.0, duration_s)
    for i in range(n):  # order and no overlap as given (later words yield to earlier)
        if i:
            starts[i] = max(starts[i], ends[i - 1])
        ends[i] = max(ends[i], starts[i])
    for i in range(n):  # grow into the free time around each short word
        short = min_s - (ends[i] - starts[i])
        if short <= 1e-12:
            continue
        left = _free(starts[i], ends[i - 1] if i else 0.0, pauses)
        right = _free(ends[i], starts[i + 1] if i + 1 < n else duration_s, pauses)
        take_left = min(left, max(short / 2.0, short - right))
        take_right = min(right, short - take_left)
        starts[i] -= take_left
        ends[i] += take_right
    for i in range(n):  # still short: push the next word's start (forward pass) ...
        if i:
            starts[i] = max(starts[i], ends[i - 1])
        ends[i] = max(ends[i], starts[i] + min_s)
    for i in range(n - 1, -1, -1):  # ... and pull back from the end (backward pass)
        ends[i] = min(ends[i], starts[i + 1] if i + 1 < n else duration_s)
        starts[i] = min(starts[i], ends[i] - min_s)
    starts = np.maximum(starts, 0.0)
    return [WordSpan(w.word, float(a), float(b), w.confidence)
            for w, a, b in zip(words, starts, ends)]


def _free(edge: float, limit: float, pauses: Optional[Sequence[Tuple[float, float]]]
          ) -> float:
    """Seconds from a word's ``edge`` towards ``limit`` (the neighbour's edge or the end of
    the audio) before the first pause of ``pauses`` begins."""
    lo, hi = min(edge, limit), max(edge, limit)
    stop = limit
    for a, b in pauses or ():
        if b > lo + 1e-9 and a < hi - 1e-9:  # a pause inside the free stretch
            stop = max(stop, min(b, edge)) if limit < edge else min(stop, max(a, edge))
    return abs(stop - edge)


def tokens_in_words(raw: Sequence[Tuple[float, float]], units: Sequence[str],
                    groups: Sequence[Sequence[int]], frame_words: Sequence[WordSpan],
                    words: Sequence[WordSpan]) -> List[Interval]:
    """Token intervals inside their words: each word's tokens mapped linearly from the
    word's frame-time interval ``frame_words[j]`` onto its final one ``words[j]`` (a word
    of zero frame-time length shares its interval evenly); units of no word fill the gap
    between the words beside them."""
    out: List[Optional[Interval]] = [None] * len(units)
    for group, before, after in zip(groups, frame_words, words):
        length = before.end_s - before.start_s
        scale = (after.end_s - after.start_s) / length if length > 1e-9 else 0.0
        for k, i in enumerate(group):
            if scale > 0:
                a = after.start_s + (raw[i][0] - before.start_s) * scale
                b = after.start_s + (raw[i][1] - before.start_s) * scale
            else:
                step = (after.end_s - after.start_s) / len(group)
                a, b = after.start_s + k * step, after.start_s + (k + 1) * step
            out[i] = (min(max(a, after.start_s), after.end_s),
                      min(max(b, after.start_s), after.end_s), units[i])
    word_of = {i: j for j, group in enumerate(groups) for i in group}
    for i, unit in enumerate(units):
        if out[i] is not None:
            continue
        prev_end = max([words[word_of[k]].end_s for k in range(i) if k in word_of], default=0.0)
        nxt = [words[word_of[k]].start_s for k in range(i + 1, len(units)) if k in word_of]
        next_start = nxt[0] if nxt else max(prev_end, raw[i][1])
        out[i] = (prev_end, max(prev_end, next_start), unit)
    return [x for x in out if x is not None]
