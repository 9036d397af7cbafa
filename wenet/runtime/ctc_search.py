"""CTC searches on numpy log-probabilities: the algorithms of ``wenet.decode.ctc`` (greedy
best path, prefix beam search with hotword biasing) and ``wenet.decode.ctc_lm`` (n-gram
LM fusion, whose pure-Python loop is reused as it is), without torch.

The prefix beam search follows the tensor search step for step, in float32 as it
does: per frame, the candidates are every prefix staying (by blank, repeat, or merged
from its parent) followed by every prefix + top-k unit, and the ``beam_size`` best survive.
Ties (candidates of exactly equal score) go to the earlier candidate in that order, and
the per-frame top-k to the lower unit id; torch's ``topk`` leaves tie order unspecified
(on CPU it is neither), so only exact ties can make the two differ.
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion, ctc_lm_search_utterance
from wenet.decode.hyps import NEG_INF, Hyp, NBest

_NEG = np.float32(NEG_INF)


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries along the last axis, largest first, ties to
    the lower index."""
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def ctc_greedy_search(logprobs: np.ndarray, lengths: Sequence[int],
                      blank_id: int = 0) -> List[List[int]]:
    """Best path of each utterance of (B, T, V) log-probabilities: argmax per frame (the
    first on ties), repeats merged, blanks dropped."""
    out = []
    for b, n in enumerate(lengths):
        best = logprobs[b, :int(n)].argmax(axis=-1)
        prev = np.concatenate([[blank_id], best[:-1]])
        out.append(best[(best != blank_id) & (best != prev)].tolist())
    return out


class ContextTables(NamedTuple):
    """A context graph's dense tables (``ContextGraph.tables`` in numpy): column of each
    unit, next state and bonus per (state, column), and the final bonus per state."""

    column: np.ndarray
    next_state: np.ndarray
    bonus: np.ndarray
    final: np.ndarray

    @classmethod
    def of(cls, graph: ContextGraph, vocab_size: int) -> "ContextTables":
        alphabet = sorted({t for c in graph.children for t in c})
        bad = [t for t in alphabet if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"context phrase units {bad} outside the vocabulary "
                             f"of size {vocab_size}")
        column = np.full(vocab_size, len(alphabet), dtype=np.int64)
        column[alphabet] = np.arange(len(alphabet))
        S = graph.num_states
        nxt = np.zeros((S, len(alphabet) + 1), dtype=np.int64)
        bonus = np.zeros((S, len(alphabet) + 1), dtype=np.float64)
        for s in range(S):
            for a, t in enumerate(alphabet):
                bonus[s, a], nxt[s, a] = graph.forward_one_step(s, t)
            bonus[s, -1] = -graph.context_score * graph.depth[s]
        final = np.array([graph.finalize(s)[0] for s in range(S)], dtype=np.float64)
        return cls(column, nxt, bonus.astype(np.float32), final.astype(np.float32))


class _Beam:
    """One utterance's prefix beam (``wenet.decode.ctc._Beam`` of one row): blank- and
    token-ending log scores, last unit, parent slot, prefix tuples, graph state and bonus."""

    def __init__(self, n: int, biased: bool) -> None:
        self.pb = np.full(n, _NEG, dtype=np.float32)
        self.pb[0] = 0.0
        self.pnb = np.full(n, _NEG, dtype=np.float32)
        self.last = np.full(n, -1, dtype=np.int64)
        self.parent = np.full(n, -1, dtype=np.int64)
        self.prefixes: List[Optional[Hyp]] = [()] + [None] * (n - 1)
        self.cstate = np.zeros(n, dtype=np.int64) if biased else None
        self.cscore = np.zeros(n, dtype=np.float32) if biased else None


def ctc_prefix_beam_search(logprobs: np.ndarray, lengths: Sequence[int], beam_size: int,
                           blank_id: int = 0, blank_skip_threshold: Optional[float] = 0.999,
                           context_graph: Optional[ContextGraph] = None) -> List[NBest]:
    """The n-best ``(prefix, log score)`` of each utterance of (B, T, V) log-probabilities,
    best first: ``wenet.decode.ctc.ctc_prefix_beam_search`` (its docstring says what blank
    skipping and the hotword bonus do)."""
    lp_all = np.asarray(logprobs, dtype=np.float32)
    V = lp_all.shape[-1]
    tables = None if context_graph is None else ContextTables.of(context_graph, V)
    skip_log = None if blank_skip_threshold is None else math.log(blank_skip_threshold)
    return [_search(lp_all[b, :int(n)], beam_size, blank_id, skip_log, tables)
            for b, n in enumerate(lengths)]


def _search(lp: np.ndarray, N: int, blank_id: int, skip_log: Optional[float],
            tables: Optional[ContextTables]) -> NBest:
    beam = _Beam(N, tables is not None)
    K = min(N, lp.shape[-1])
    ids_all = top_k(lp, K)
    for t in range(lp.shape[0]):
        total = np.logaddexp(beam.pb, beam.pnb)
        if skip_log is not None and lp[t, blank_id] > np.float32(skip_log):
            beam.pb, beam.pnb = total + lp[t, blank_id], np.full(N, _NEG, dtype=np.float32)
            continue
        _prefix_step(beam, total, lp[t], ids_all[t], blank_id, tables)
    total = np.logaddexp(beam.pb, beam.pnb)
    if tables is not None:
        total = total + beam.cscore + tables.final[beam.cstate]
    nbest = [(p, float(s)) for p, s in zip(beam.prefixes, total.tolist())
             if p is not None and s > NEG_INF]
    nbest.sort(key=lambda x: -x[1])
    return nbest


def _prefix_step(beam: _Beam, total: np.ndarray, frame: np.ndarray, ids_k: np.ndarray,
                 blank_id: int, tables: Optional[ContextTables]) -> None:
    """One full frame (``wenet.decode.ctc.prefix_step`` for one utterance), in place."""
    N, K = beam.pb.size, ids_k.size
    lp = np.full(frame.shape, _NEG, dtype=np.float32)
    lp[ids_k] = frame[ids_k]
    lp_k = lp[ids_k]
    stay_pb, stay_pnb = _stay_scores(beam, total, lp, blank_id)
    ext = _extension_scores(beam, total, lp_k, ids_k, lp.size, blank_id).reshape(N * K)
    cand = np.concatenate([np.logaddexp(stay_pb, stay_pnb), ext])
    if tables is not None:
        col = tables.column[ids_k][None, :]
        state = beam.cstate[:, None]
        ext_state = tables.next_state[state, col].reshape(N * K)
        ext_score = (beam.cscore[:, None] + tables.bonus[state, col]).reshape(N * K)
        cand = cand + np.concatenate([beam.cscore, ext_score])
    sel = top_k(cand, N)
    is_stay = sel < N
    ext_i = np.maximum(sel - N, 0)
    src = np.where(is_stay, sel, ext_i // K)
    tok = ids_k[np.where(is_stay, 0, ext_i % K)]
    new_pb = np.where(is_stay, stay_pb[src], _NEG)
    new_pnb = np.where(is_stay, stay_pnb[src], ext[ext_i])
    new_last = np.where(is_stay, beam.last[src], tok)
    alive = (np.logaddexp(new_pb, new_pnb) > NEG_INF).tolist()
    old = beam.prefixes
    new: List[Optional[Hyp]] = []
    for i, (s, stay, k) in enumerate(zip(src.tolist(), is_stay.tolist(), tok.tolist())):
        new.append(None if not alive[i] else old[s] if stay else old[s] + (k,))
    index: Dict[Hyp, int] = {h: i for i, h in enumerate(new) if h is not None}
    beam.parent = np.array([index.get(h[:-1], -1) if h else -1 for h in new], dtype=np.int64)
    beam.prefixes, beam.pb, beam.pnb, beam.last = new, new_pb, new_pnb, new_last
    if tables is not None:
        beam.cstate = np.where(is_stay, beam.cstate[src], ext_state[ext_i])
        beam.cscore = np.where(is_stay, beam.cscore[src], ext_score[ext_i])


def _stay_scores(beam: _Beam, total: np.ndarray, lp: np.ndarray,
                 blank_id: int) -> Tuple[np.ndarray, np.ndarray]:
    """(pb, pnb) of each prefix staying as it is: by blank, by repeating its last unit,
    or by its parent (when in the beam) taking that unit."""
    lp_last = np.where(beam.last < 0, _NEG, lp[np.maximum(beam.last, 0)])
    stay_pb = total + lp[blank_id]
    stay_pnb = beam.pnb + lp_last
    par = np.maximum(beam.parent, 0)
    from_parent = np.where(beam.last[par] == beam.last, beam.pb[par], total[par]) + lp_last
    return stay_pb, np.logaddexp(stay_pnb, np.where(beam.parent >= 0, from_parent, _NEG))


def _extension_scores(beam: _Beam, total: np.ndarray, lp_k: np.ndarray, ids_k: np.ndarray,
                      V: int, blank_id: int) -> np.ndarray:
    """(N, K) scores of prefix + top-k unit; -inf for blanks and for extensions already in
    the beam (merged into the stay scores)."""
    N = beam.pb.size
    exists = np.zeros((N + 1, V), dtype=bool)
    exists[np.where(beam.parent >= 0, beam.parent, N), np.maximum(beam.last, 0)] = True
    ext_exists = exists[:N][:, ids_k]
    same = ids_k[None, :] == beam.last[:, None]
    ext = np.where(same, beam.pb[:, None], total[:, None]) + lp_k[None, :]
    return np.where(ext_exists | (ids_k == blank_id)[None, :], _NEG, ext)


def ctc_lm_prefix_beam_search(logprobs: np.ndarray, lengths: Sequence[int], beam_size: int,
                              fusion: LMFusion, blank_id: int = 0,
                              blank_skip_threshold: Optional[float] = 0.999) -> List[NBest]:
    """``wenet.decode.ctc_lm.ctc_lm_prefix_beam_search`` on numpy: the same per-utterance
    loop (``ctc_lm_search_utterance``) on float64 lists."""
    lp_all = np.asarray(logprobs, dtype=np.float64)
    k = min(beam_size, lp_all.shape[-1])
    out = []
    for b, n in enumerate(lengths):
        lp = lp_all[b, :int(n)]
        ids = top_k(lp, k)
        out.append(ctc_lm_search_utterance(
            lp.tolist(), np.take_along_axis(lp, ids, axis=-1).tolist(), ids.tolist(),
            beam_size, fusion, blank_id, blank_skip_threshold))
    return out
