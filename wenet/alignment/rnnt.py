"""Transducer forced alignment: the frame on which each token of a known transcript is
emitted on the best path through a transducer's lattice, and (steered by the audio's
pauses) where each word ends.

``rnnt_viterbi_frames`` searches the lattice of joint log-probabilities: a path moves from
(t, u) by a blank to (t + 1, u) or by token ``u + 1`` to (t, u + 1). A token takes one
frame, so the lattice alone says when a word starts, not how long it lasts.
``rnnt_steered_alignment`` adds what CTC's states carry (``pauses.pause_bias``): each
state is *in* a word (its last emitted token's word goes on) or *out* of every word;
after a word's last token the path may step out once, between frames, at no cost. The
blank of frame ``t`` costs ``pause_penalty * pause[t]`` in a word and ``speech_penalty *
(1 - pause[t])`` out of every word; emitting a token costs ``pause_penalty * pause[t]``.
So each stretch of speech is claimed by a word and each word's end seeks a pause, as in
the CTC search. ``transducer_token_spans`` runs a model's predictor and joint over the
transcript and returns one ``TokenSpan`` per token, which ``timing.time_tokens`` turns
into times like CTC's spans.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from wenet.alignment.align import AlignmentError, TokenSpan


def _lattice_scores(log_probs: torch.Tensor, tokens: Sequence[int], blank: int
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """(blank (T, U + 1), emit (T, U)) log-probabilities of the lattice."""
    lp = log_probs.detach().double().cpu()
    T, U = lp.size(0), len(tokens)
    if T == 0:
        raise AlignmentError("too few frames", "no encoder frame")
    if lp.size(1) != U + 1:
        raise ValueError(f"log_probs has {lp.size(1)} label positions for {U} tokens")
    blank_lp = lp[:, :, blank].numpy().copy()
    emit_lp = (np.stack([lp[:, u, tokens[u]].numpy() for u in range(U)], axis=1)
               if U else np.zeros((T, 0)))
    return blank_lp, emit_lp


def rnnt_viterbi_frames(log_probs: torch.Tensor, tokens: Sequence[int], blank: int
                        ) -> List[int]:
    """The frame on which each token is emitted on the best path of the transducer lattice.

    ``log_probs[t, u]`` (T, U + 1, V) are the joint's log-probabilities at frame ``t``
    after ``u`` tokens. A path starts at (0, 0) and ends with the blank from (T - 1, U);
    with ``a[t, u]`` the best score of reaching (t, u),
    ``a[t, u] = max(a[t - 1, u] + blank(t - 1, u), a[t, u - 1] + emit(t, u - 1))``.
    """
    blank_lp, emit_lp = _lattice_scores(log_probs, tokens, blank)
    T, U = emit_lp.shape
    alpha = np.full((T, U + 1), -np.inf)
    came_by_token = np.zeros((T, U + 1), dtype=bool)
    for t in range(T):
        row = np.full(U + 1, -np.inf)
        if t == 0:
            row[0] = 0.0
        else:
            row = alpha[t - 1] + blank_lp[t - 1]
        for u in range(1, U + 1):  # tokens within one frame: a running maximum
            move = row[u - 1] + emit_lp[t, u - 1]
            if move > row[u]:
                row[u] = move
                came_by_token[t, u] = True
        alpha[t] = row
    if not np.isfinite(alpha[T - 1, U] + blank_lp[T - 1, U]):
        raise AlignmentError("no valid path", f"{U} tokens in {T} frames")
    frames, t, u = [0] * U, T - 1, U
    while u > 0:
        if came_by_token[t, u]:
            frames[u - 1] = t
            u -= 1
        else:
            t -= 1
    return frames


IN, OUT = 0, 1


def rnnt_steered_alignment(log_probs: torch.Tensor, tokens: Sequence[int], blank: int,
                           pause: np.ndarray, word_starts: Sequence[bool],
                           pause_penalty: float, speech_penalty: float
                           ) -> Tuple[List[int], List[int]]:
    """The best path of the lattice with the in/out states and costs of the module's
    docstring: (emitting frame of each token, end frame of each word). Word ``w`` lasts
    from its first token's frame to its end frame (exclusive): the frame whose blank is
    the first out of every word after it, or the next word's first frame, or ``T``.

    ``a[t, u, p]`` is the best score of being at frame ``t`` after ``u`` tokens in phase
    ``p`` (before frame ``t``'s blank): emissions within a frame go ``(u, any) -> (u + 1,
    in)`` for a token that starts a word (``(u, in) -> (u + 1, in)`` for one that goes on
    with its word), then ``(u, in) -> (u, out)`` where ``u`` ends a word, then the blank
    ``(t, u, p) -> (t + 1, u, p)``. It starts at (0, 0, out)."""
    frames, out_at, _ = rnnt_steered_path(log_probs, tokens, blank, pause, word_starts,
                                      pause_penalty, speech_penalty)
    T = log_probs.size(0)
    word_of = np.cumsum([True] + [bool(x) for x in list(word_starts)[1:]]) - 1
    first = {int(w): frames[u] for u, w in reversed(list(enumerate(word_of)))}
    last = {int(w): frames[u] for u, w in enumerate(word_of)}
    word_end = []
    for w, at in enumerate(out_at):  # never stepped out: it lasts until the next word
        end = at if at >= 0 else (first[w + 1] if w + 1 < len(out_at) else T)
        word_end.append(max(end, last[w] + 1))
    return frames, word_end


def rnnt_steered_path(log_probs: torch.Tensor, tokens: Sequence[int], blank: int,
                  pause: np.ndarray, word_starts: Sequence[bool], pause_penalty: float,
                  speech_penalty: float) -> Tuple[List[int], List[int], float]:
    """The best steered path: (emitting frames, the frame of each word's step out or
    -1, its score)."""
    blank_lp, emit_lp = _lattice_scores(log_probs, tokens, blank)
    T, U = emit_lp.shape
    pause = np.asarray(pause, dtype=np.float64)
    if pause.shape != (T,):
        raise ValueError(f"pause must be ({T},), got {pause.shape}")
    starts = [bool(x) for x in word_starts]
    if U and not starts[0]:
        starts[0] = True
    ends_word = np.array([u == U or starts[u] for u in range(U + 1)])  # state u ends a word
    cost = np.stack([-pause_penalty * pause, -speech_penalty * (1.0 - pause)], axis=1)  # (T, 2)
    emit_bias = -pause_penalty * pause
    alpha = np.full((T, U + 1, 2), -np.inf)
    # back-pointers: how (t, u, p) was reached: 0 blank from t - 1, 1 token from (u-1, IN),
    # 2 token from (u-1, OUT), 3 step out from (u, IN)
    back = np.zeros((T, U + 1, 2), dtype=np.int8)
    for t in range(T):
        if t == 0:
            cur = np.full((U + 1, 2), -np.inf)
            cur[0, OUT] = 0.0
        else:
            cur = alpha[t - 1] + blank_lp[t - 1][:, None] + cost[t - 1][None, :]
        how = np.zeros((U + 1, 2), dtype=np.int8)
        for u in range(1, U + 1):
            emit = emit_lp[t, u - 1] + emit_bias[t]
            cands = [cur[u - 1, IN] + emit]
            if starts[u - 1]:
                cands.append(cur[u - 1, OUT] + emit)
            best = int(np.argmax(cands))
            if cands[best] > cur[u, IN]:
                cur[u, IN] = cands[best]
                how[u, IN] = 1 + best
        out = np.where(ends_word, cur[:, IN], -np.inf)
        step = out > cur[:, OUT]
        cur[:, OUT] = np.where(step, out, cur[:, OUT])
        how[:, OUT] = np.where(step, 3, how[:, OUT])
        alpha[t], back[t] = cur, how
    final = alpha[T - 1, U] + blank_lp[T - 1, U] + cost[T - 1]
    if not np.isfinite(final.max()):
        raise AlignmentError("no valid path", f"{U} tokens in {T} frames")
    frames = [0] * U
    word_of = np.cumsum(starts) - 1 if U else np.zeros(0, dtype=int)
    num_words = int(word_of[-1]) + 1 if U else 0
    out_at = [-1] * num_words  # the frame whose blank is the first out after word w
    t, u, p = T - 1, U, int(np.argmax(final))
    while t > 0 or u > 0 or p != OUT:
        how = back[t, u, p]
        if how == 0:
            t -= 1
        elif how == 3:
            out_at[int(word_of[u - 1])] = t
            p = IN
        else:
            frames[u - 1] = t
            u, p = u - 1, IN if how == 1 else OUT
    return frames, out_at, float(final.max())


def transducer_lattice(model: Any, encoder_out: torch.Tensor, ids: Sequence[int]
                       ) -> torch.Tensor:
    """Joint log-probabilities (T, U + 1, V) of one utterance's encoder output (1, T, D)
    against the prefixes of ``ids``: the predictor fed the blank, then each token."""
    blank = model.blank_symbol()
    state = model.predictor_init_state(1)
    preds = []
    token = torch.tensor([blank], device=encoder_out.device)
    for nxt in [None] + list(ids):
        if nxt is not None:
            token = torch.tensor([nxt], device=encoder_out.device)
        pred, state = model.forward_predictor_step(token, state)
        preds.append(pred[0])
    enc = model.project_encoder(encoder_out[0])  # (T, J)
    T, U1 = enc.size(0), len(preds)
    pred = torch.stack(preds)  # (U + 1, J)
    logits = model.forward_joint_step(enc.repeat_interleave(U1, 0), pred.repeat(T, 1))
    return torch.log_softmax(logits.float(), dim=-1).view(T, U1, -1)


def transducer_token_spans(model: Any, encoder_out: torch.Tensor, ids: Sequence[int],
                           pause: Optional[np.ndarray] = None,
                           word_starts: Optional[Sequence[bool]] = None,
                           pause_penalty: float = 0.0, speech_penalty: float = 0.0
                           ) -> List[TokenSpan]:
    """One span per token of ``ids``. Without ``pause``: its emitting frame on the best
    lattice path (``rnnt_viterbi_frames``), one frame long. With ``pause`` (and
    ``word_starts``): the steered path (``rnnt_steered_alignment``); a token spans from its
    frame to the next token of its word, the last one to its word's end. Its confidence
    is its probability where it is emitted."""
    ids = [int(i) for i in ids]
    if not ids:
        return []
    log_probs = transducer_lattice(model, encoder_out, ids)
    blank = model.blank_symbol()
    if pause is None:
        frames = rnnt_viterbi_frames(log_probs, ids, blank)
        ends = [t + 1 for t in frames]
    else:
        starts = list(word_starts) if word_starts is not None else [True] * len(ids)
        frames, word_end = rnnt_steered_alignment(log_probs, ids, blank, pause, starts,
                                                  pause_penalty, speech_penalty)
        word = np.cumsum([True] + [bool(x) for x in starts[1:]]) - 1
        ends = [max(frames[u] + 1, frames[u + 1] if u + 1 < len(ids) and word[u + 1] == word[u]
                    else word_end[word[u]]) for u in range(len(ids))]
    return [TokenSpan(tok, t, end, float(log_probs[t, u, tok].exp()))
            for u, (tok, t, end) in enumerate(zip(ids, frames, ends))]
