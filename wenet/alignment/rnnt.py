"""Transducer forced alignment: the frame on which each token of a known transcript is
emitted, on the best path through a transducer's lattice.

``rnnt_viterbi_frames`` searches the lattice of joint log-probabilities; optional
``pause`` shares per frame (``pauses.pause_fraction``) steer it as ``pauses.pause_bias``
steers the CTC search: emitting a token in a pause, or ending a frame inside a word while
the frame is pause, costs ``pause_penalty`` per frame of pause; ending a frame between
words (before the first, between two, after the last) while it is speech costs
``speech_penalty`` per frame of speech. ``transducer_token_spans`` runs a model's
predictor and joint over the transcript and returns one ``TokenSpan`` per token (its
emitting frame), which ``timing.time_tokens`` turns into times like CTC's spans.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from wenet.alignment.align import AlignmentError, TokenSpan


def rnnt_viterbi_frames(log_probs: torch.Tensor, tokens: Sequence[int], blank: int,
                        pause: Optional[np.ndarray] = None,
                        word_starts: Optional[Sequence[bool]] = None,
                        pause_penalty: float = 0.0, speech_penalty: float = 0.0) -> List[int]:
    """The frame on which each token is emitted on the best path of the transducer lattice.

    ``log_probs[t, u]`` (T, U + 1, V) are the joint's log-probabilities at frame ``t``
    after ``u`` tokens. A path moves from (t, u) by a blank to (t + 1, u) or by token
    ``u + 1`` to (t, u + 1), starts at (0, 0) and ends with the blank from (T - 1, U);
    with ``a[t, u]`` the best score of reaching (t, u),
    ``a[t, u] = max(a[t - 1, u] + blank(t - 1, u), a[t, u - 1] + emit(t, u - 1))``.
    With ``pause`` (T,) and ``word_starts`` (U,), the scores carry the biases of the
    module's docstring.
    """
    lp = log_probs.detach().double().cpu()
    T, U = lp.size(0), len(tokens)
    if T == 0:
        raise AlignmentError("too few frames", "no encoder frame")
    if lp.size(1) != U + 1:
        raise ValueError(f"log_probs has {lp.size(1)} label positions for {U} tokens")
    blank_lp = lp[:, :, blank].numpy().copy()
    emit_lp = (np.stack([lp[:, u, tokens[u]].numpy() for u in range(U)], axis=1)
               if U else np.zeros((T, 0)))
    if pause is not None:
        pause = np.asarray(pause, dtype=np.float64)
        starts = list(word_starts) if word_starts is not None else [True] * U
        between = np.array([True] + [u == U or bool(starts[u]) for u in range(1, U + 1)])
        blank_lp -= np.where(between[None, :], speech_penalty * (1.0 - pause)[:, None],
                             pause_penalty * pause[:, None])
        emit_lp = emit_lp - pause_penalty * pause[:, None]
    alpha = np.full((T, U + 1), -np.inf)
    came_by_token = np.zeros((T, U + 1), dtype=bool)
    for t in range(T):
        stay = np.full(U + 1, -np.inf)
        if t == 0:
            stay[0] = 0.0
        else:
            stay = alpha[t - 1] + blank_lp[t - 1]
        row = stay.copy()
        for u in range(1, U + 1):  # tokens within one frame: a running maximum
            move = row[u - 1] + emit_lp[t, u - 1]
            if move > row[u]:
                row[u] = move
                came_by_token[t, u] = True
        alpha[t] = row
    if not np.isfinite(alpha[T - 1, U]):
        raise AlignmentError("no valid path", f"{U} tokens in {T} frames")
    frames, t, u = [0] * U, T - 1, U
    while u > 0:
        if came_by_token[t, u]:
            frames[u - 1] = t
            u -= 1
        else:
            t -= 1
    return frames


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
    """One span per token of ``ids``: its emitting frame on the best lattice path
    (``rnnt_viterbi_frames``, steered by ``pause`` when given); its confidence is its
    probability there."""
    ids = [int(i) for i in ids]
    if not ids:
        return []
    log_probs = transducer_lattice(model, encoder_out, ids)
    frames = rnnt_viterbi_frames(log_probs, ids, model.blank_symbol(), pause, word_starts,
                                 pause_penalty, speech_penalty)
    return [TokenSpan(tok, t, t + 1, float(log_probs[t, u, tok].exp()))
            for u, (tok, t) in enumerate(zip(ids, frames))]
