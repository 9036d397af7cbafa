"""CTC forced alignment: which frames carry which token of a known transcript.

``ctc_forced_align`` is the Viterbi search over the CTC topology of a token
sequence ``y_1 .. y_L``: the extended sequence ``blank y_1 blank y_2 .. y_L blank``
(``S = 2L + 1`` states), where each frame either stays in its state, moves to the
next one, or skips a blank between two *different* labels. With ``alpha[t, s]``
the best log-score of a path that is in state ``s`` at frame ``t``,

    alpha[t, s] = logp[t, ext[s]] + max(alpha[t-1, s], alpha[t-1, s-1],
                                        alpha[t-1, s-2] if ext[s] != blank and ext[s] != ext[s-2])

started in the first blank or the first label and ended in the last label or
the last blank. The recursion runs over frames; each frame updates all states
at once. It computes what ``torchaudio.functional.forced_align`` computes
(tests/alignment/test_align.py checks the two agree, and both against brute force).

``token_spans`` turns the frame path into one span per token, ``word_spans``
groups sentencepiece pieces into words with times in seconds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

WORD_START = "\u2581"  # sentencepiece's word-start mark (also the space unit of char models)
_CJK = re.compile(r"[\u4e00-\u9fff]")


class AlignmentError(ValueError):
    """A transcript that cannot be aligned to its frames; ``reason`` says why in a few words
    (``too few frames``, ``token out of range``, ``no valid path``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def frames_needed(tokens: Sequence[int]) -> int:
    """The fewest frames a CTC path of ``tokens`` takes: one per token, plus one blank
    between each pair of equal neighbours."""
    repeats = sum(1 for a, b in zip(tokens, tokens[1:]) if a == b)
    return len(tokens) + repeats


def _check(log_probs: torch.Tensor, tokens: Sequence[int], blank_id: int) -> None:
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be (T, V), got shape {tuple(log_probs.shape)}")
    num_frames, vocab = log_probs.shape
    if not 0 <= blank_id < vocab:
        raise AlignmentError("blank out of range", f"blank id {blank_id}, vocabulary {vocab}")
    bad = [t for t in tokens if not 0 <= t < vocab or t == blank_id]
    if bad:
        raise AlignmentError("token out of range",
                             f"ids {sorted(set(bad))} (vocabulary 0..{vocab - 1}, blank {blank_id})")
    needed = frames_needed(tokens)
    if num_frames < needed:
        raise AlignmentError("too few frames",
                             f"{num_frames} frames for {len(tokens)} tokens that need {needed}")


def _viterbi(emit: np.ndarray, skip: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Forward pass over frames: (final alpha (S,), back-pointers (T, S) as state offsets
    0/1/2). ``emit`` (T, S) holds each state's log-prob per frame, ``skip`` (S,) where the
    move s-2 -> s is allowed."""
    num_frames, num_states = emit.shape
    alpha = np.full(num_states, -np.inf, dtype=emit.dtype)
    alpha[: min(2, num_states)] = emit[0, : min(2, num_states)]
    back = np.zeros((num_frames, num_states), dtype=np.int8)
    cand = np.full((3, num_states), -np.inf, dtype=emit.dtype)
    no_skip = ~skip[2:]
    for t in range(1, num_frames):
        cand[0] = alpha
        cand[1, 1:] = alpha[:-1]
        cand[2, 2:] = alpha[:-2]
        cand[2, 2:][no_skip] = -np.inf
        arg = cand.argmax(axis=0)  # the first of equal candidates: stay, then move, then skip
        back[t] = arg
        alpha = cand[arg, np.arange(num_states)] + emit[t]
    return alpha, back


def ctc_forced_align(log_probs: torch.Tensor, tokens: Sequence[int],
                     blank_id: int = 0, state_bias: Optional[np.ndarray] = None) -> List[int]:
    """The best CTC path of ``tokens`` through ``log_probs`` (T, V): one label per frame
    (``blank_id`` or a token), length T. Raises AlignmentError when T is shorter than
    ``frames_needed(tokens)``, for token ids outside ``[0, V)`` or equal to the blank, and
    when every path has probability zero. No tokens: all blanks.

    ``state_bias`` (T, 2L + 1), when given, is added to the log-prob of each state of the
    extended sequence ``blank y_1 blank .. y_L blank`` at each frame before the search (a
    prior over where the path may be: ``pauses.pause_bias``); the returned path is the
    best one under the biased scores.
    """
    tokens = [int(t) for t in tokens]
    _check(log_probs, tokens, blank_id)
    num_frames = log_probs.size(0)
    if not tokens:
        return [blank_id] * num_frames
    ext = np.full(2 * len(tokens) + 1, blank_id, dtype=np.int64)
    ext[1::2] = tokens
    skip = np.zeros(ext.shape, dtype=bool)
    skip[2:] = (ext[2:] != blank_id) & (ext[2:] != ext[:-2])
    dtype = np.float64 if log_probs.dtype == torch.float64 else np.float32
    emit = log_probs.detach().cpu().numpy().astype(dtype, copy=False)[:, ext]
    if state_bias is not None:
        if state_bias.shape != emit.shape:
            raise ValueError(f"state_bias must be (T, 2L+1) = {emit.shape}, got {state_bias.shape}")
        emit = emit + state_bias.astype(dtype, copy=False)
    alpha, back = _viterbi(emit, skip)
    last = len(ext) - 1
    state = last if alpha[last] >= alpha[last - 1] else last - 1
    if alpha[state] == -np.inf:
        raise AlignmentError("no valid path", "every path through the frames has probability 0")
    path = [0] * num_frames
    for t in range(num_frames - 1, -1, -1):
        path[t] = int(ext[state])
        state -= int(back[t, state])
    return path


def path_score(path: Sequence[int], log_probs: torch.Tensor) -> float:
    """Log-probability of a frame path: the sum of ``log_probs[t, path[t]]``."""
    index = torch.as_tensor(list(path), dtype=torch.long)
    return float(log_probs.detach().cpu().double()[torch.arange(len(index)), index].sum())


@dataclass
class TokenSpan:
    """One aligned token: frames ``[start, end)`` and the mean posterior probability
    of the token on those frames."""

    token: int
    start: int
    end: int
    score: float


def token_spans(path: Sequence[int], log_probs: torch.Tensor,
                blank_id: int = 0) -> List[TokenSpan]:
    """One span per token of a CTC frame path: a run of equal non-blank labels (a repeated
    token is split from its twin by a blank, so a run is always one token)."""
    probs = log_probs.detach().cpu().double().exp().numpy()
    labels = np.asarray(path, dtype=np.int64)
    spans: List[TokenSpan] = []
    t, num_frames = 0, len(labels)
    while t < num_frames:
        label = int(labels[t])
        end = t + 1
        while end < num_frames and labels[end] == label:
            end += 1
        if label != blank_id:
            score = float(probs[t:end, label].mean())
            spans.append(TokenSpan(label, t, end, score))
        t = end
    return spans


@dataclass
class WordSpan:
    """One aligned word: start and end in seconds, confidence = mean score of its tokens."""

    word: str
    start_s: float
    end_s: float
    confidence: float


def starts_word(piece: str) -> bool:
    """Whether a unit begins a new word (``▁``-prefixed piece or a CJK character)."""
    return piece.startswith(WORD_START) or bool(_CJK.match(piece))


def word_groups(token_strings: Sequence[str]) -> List[List[int]]:
    """Indices of the units of each word, in order. A piece starting with ``▁`` starts a
    word (a lone ``▁``, the space of a char model, only marks the boundary and belongs to
    no word); a CJK character is a word of its own; any other piece continues the
    current word."""
    groups: List[List[int]] = []
    open_word = False
    for i, piece in enumerate(token_strings):
        text = piece.replace(WORD_START, "")
        if starts_word(piece) or not open_word:
            groups.append([])
        if text:
            groups[-1].append(i)
            open_word = not _CJK.match(piece)
        else:
            open_word = False
    return [g for g in groups if g]


def word_spans(spans: Sequence[TokenSpan], token_strings: Sequence[str],
               frame_shift_s: float) -> List[WordSpan]:
    """Group token spans into words (``word_groups``). ``token_strings[i]`` is the unit
    of ``spans[i]`` (one per span). Frame ``f`` is at ``f * frame_shift_s`` seconds
    (``frame_shift_s`` = subsampling rate x fbank frame shift): raw frame times, no
    offset; ``timing.time_tokens`` gives the times the outputs report.
    """
    if len(spans) != len(token_strings):
        raise ValueError(f"{len(spans)} spans but {len(token_strings)} token strings")
    words: List[WordSpan] = []
    for group in word_groups(token_strings):
        word = "".join(token_strings[i].replace(WORD_START, "") for i in group)
        first, last = spans[group[0]], spans[group[-1]]
        conf = sum(spans[i].score for i in group) / len(group)
        words.append(WordSpan(word, first.start * frame_shift_s, last.end * frame_shift_s, conf))
    return words


def token_intervals(spans: Sequence[TokenSpan], token_strings: Sequence[str],
                    frame_shift_s: float) -> List[Tuple[float, float, str]]:
    """(start s, end s, unit) of each token span, on the time scale of ``word_spans``."""
    if len(spans) != len(token_strings):
        raise ValueError(f"{len(spans)} spans but {len(token_strings)} token strings")
    return [(s.start * frame_shift_s, s.end * frame_shift_s, piece)
            for s, piece in zip(spans, token_strings)]


def frame_shift_seconds(subsampling_rate: int, fbank_frame_shift_ms: float) -> float:
    """Seconds per encoder output frame: ``model.subsampling_rate()`` input frames of
    ``FeatureConf.frame_shift`` milliseconds each."""
    return subsampling_rate * fbank_frame_shift_ms / 1000.0
