"""Transducer searches on numpy: ``wenet.decode.transducer``'s greedy search and modified
beam search (multi-blank aware, hotwords), step for step, over a network given as numpy
functions (:class:`TransducerNet`: the ONNX sessions, or anything with that face).

Scores are float64 sums of the joint's float32 log-softmax, as in the torch searches.
The beam keeps the ``beam_size`` best (hypothesis, output) candidates per utterance and
frame (ties to the earlier candidate: hypothesis row, then output id; torch's topk
leaves their order unspecified), merges equal hypotheses by log-add and cuts those
entering a frame to the beam, in the torch search's order.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from wenet.decode.context_graph import ContextGraph
from wenet.decode.hyps import NEG_INF, Hyp, NBest, finished_transducer_nbest
from wenet.runtime.ctc_search import top_k

State = List[np.ndarray]


class TransducerNet(Protocol):
    """What the searches call (``wenet.runtime.session.TransducerSessions`` offers it)."""

    blank_id: int
    big_blank_ids: List[int]
    big_blank_durations: List[int]

    def project_encoder(self, encoder_out: np.ndarray) -> np.ndarray:
        """(B, T, D) encoder output → (B, T, J) joint inputs."""

    def predictor_init_state(self, n: int) -> State:
        """The predictor state of ``n`` empty histories (batch first)."""

    def predictor_step(self, tokens: np.ndarray, state: State) -> Tuple[np.ndarray, State]:
        """Feed ``tokens`` (n,) → (projected predictor output (n, J), new state)."""

    def joint(self, enc_proj: np.ndarray, pred_proj: np.ndarray) -> np.ndarray:
        """(n, J) and (n, J) → logits (n, V')."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float32 log-softmax over the last axis."""
    x = np.asarray(logits, dtype=np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _start(net: TransducerNet, n: int) -> Tuple[np.ndarray, State]:
    """Predictor output and state of ``n`` hypotheses after the initial blank."""
    return net.predictor_step(np.full(n, net.blank_id, dtype=np.int64),
                              net.predictor_init_state(n))


def rnnt_greedy_search(net: TransducerNet, encoder_out: np.ndarray, lengths: Sequence[int],
                       max_sym_per_frame: int = 1) -> List[List[int]]:
    """Best transition at every step (``wenet.decode.transducer.rnnt_greedy_search``): per
    frame labels until a blank or ``max_sym_per_frame`` labels; a big blank of d frames
    skips the next d - 1."""
    if max_sym_per_frame < 1:
        raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
    B, T = encoder_out.shape[:2]
    enc_proj = net.project_encoder(encoder_out)
    pred, state = _start(net, B)
    hyps: List[List[int]] = [[] for _ in range(B)]
    skip = np.zeros(B, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)
    for t in range(T):
        active = (t < lens) & (skip == 0)
        skip = np.maximum(skip - 1, 0)
        for _ in range(max_sym_per_frame):
            rows = np.nonzero(active)[0]
            if rows.size == 0:
                break
            best = log_softmax(net.joint(enc_proj[rows, t], pred[rows])).argmax(axis=-1)
            ends = best == net.blank_id
            for i, d in zip(net.big_blank_ids, net.big_blank_durations):
                hit = best == i
                ends |= hit
                skip[rows[hit]] = d - 1
            active[rows] = ~ends
            emit, tokens = rows[~ends], best[~ends]
            if emit.size == 0:
                break
            for r, k in zip(emit.tolist(), tokens.tolist()):
                hyps[r].append(k)
            new_pred, new_state = net.predictor_step(tokens, [s[emit] for s in state])
            pred = pred.copy()
            pred[emit] = new_pred
            state = [_replaced(s, emit, n) for s, n in zip(state, new_state)]
    return hyps


def _replaced(dst: np.ndarray, rows: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = dst.copy()
    out[rows] = src
    return out


class _Pool:
    """Live hypotheses of all utterances, one row each (``wenet.decode.transducer._Pool``)."""

    def __init__(self, utt: List[int], seq: List[Hyp], pos: List[int], ctx: List[int],
                 score: List[float], pred: np.ndarray, state: State) -> None:
        self.utt, self.seq, self.pos, self.ctx, self.score = utt, seq, pos, ctx, score
        self.pred, self.state = pred, state


class _Candidates:
    """The next pool being built: rows keyed by (utt, seq, pos, ctx), merged by log-add."""

    def __init__(self) -> None:
        self.index: Dict[Tuple[int, Hyp, int, int], int] = {}
        self.rows: List[List] = []  # [utt, seq, pos, ctx, score, src, token]

    def add(self, utt: int, seq: Hyp, pos: int, ctx: int, score: float, src: int,
            token: int) -> None:
        key = (utt, seq, pos, ctx)
        j = self.index.get(key)
        if j is None:
            self.index[key] = len(self.rows)
            self.rows.append([utt, seq, pos, ctx, score, src, token])
            return
        a = self.rows[j][4]
        hi = max(a, score)
        self.rows[j][4] = hi if hi == NEG_INF else hi + math.log1p(math.exp(-abs(a - score)))


def rnnt_beam_search(net: TransducerNet, encoder_out: np.ndarray, lengths: Sequence[int],
                     beam_size: int = 4, length_norm: bool = False,
                     context_graph: Optional[ContextGraph] = None) -> List[NBest]:
    """Modified beam search, at most one label per frame, over the whole batch
    (``wenet.decode.transducer.rnnt_beam_search``): per utterance the n-best
    ``(tokens, score)``, best first."""
    B = encoder_out.shape[0]
    lens = [int(n) for n in lengths]
    enc_proj = net.project_encoder(encoder_out)
    pred, state = _start(net, B)
    pool = _Pool(list(range(B)), [()] * B, [0] * B, [0] * B, [0.0] * B, pred, state)
    for t in range(max(lens, default=0)):
        active = [i for i, (u, p) in enumerate(zip(pool.utt, pool.pos)) if p == t < lens[u]]
        if active:
            pool = _step(net, pool, active, enc_proj, t, lens, beam_size, context_graph)
    return finished_transducer_nbest(pool, B, lens, beam_size, length_norm, context_graph)


def _step(net: TransducerNet, pool: _Pool, active: List[int], enc_proj: np.ndarray, t: int,
          lens: List[int], beam: int, graph: Optional[ContextGraph]) -> _Pool:
    """One frame: expand the hypotheses on frame ``t``, keep the best, feed the predictor."""
    utts = [pool.utt[i] for i in active]
    logits = net.joint(enc_proj[utts, t], pool.pred[active])
    logp = log_softmax(logits).astype(np.float64)
    durations = dict(zip(net.big_blank_ids, net.big_blank_durations))
    room = np.array([lens[u] - t for u in utts])
    for i, d in durations.items():  # a big blank must land on or before the last frame
        logp[room < d, i] = NEG_INF
    slot, seen = [], {}
    for u in utts:
        slot.append(seen.get(u, 0))
        seen[u] = slot[-1] + 1
    K, V = max(seen.values()), logp.shape[1]
    scores = np.array([pool.score[i] for i in active], dtype=np.float64)
    cand = np.full((len(lens), K, V), NEG_INF, dtype=np.float64)
    cand[utts, slot] = scores[:, None] + logp
    flat = cand.reshape(len(lens), -1)
    top_i = top_k(flat, min(beam, K * V))
    row_of = {(u, k): r for u, k, r in zip(utts, slot, active)}
    nxt = _Candidates()
    for i in range(len(pool.utt)):  # hypotheses waiting for a later frame stay
        if pool.pos[i] != t or pool.pos[i] >= lens[pool.utt[i]]:
            nxt.add(pool.utt[i], pool.seq[i], pool.pos[i], pool.ctx[i], pool.score[i], i, -1)
    for u in seen:
        for k in top_i[u].tolist():
            s = float(flat[u, k])
            if s == NEG_INF:
                break
            _add_candidate(nxt, pool, row_of[(u, k // V)], k % V, s, t, net.blank_id,
                           durations, graph)
    return _next_pool(net, pool, nxt, t + 1, beam)


def _add_candidate(nxt: _Candidates, pool: _Pool, src: int, v: int, score: float, t: int,
                   blank: int, durations: Dict[int, int], graph: Optional[ContextGraph]) -> None:
    """Row ``src`` followed by output ``v`` (blank, big blank or label) on frame ``t``."""
    seq, ctx = pool.seq[src], pool.ctx[src]
    if v == blank or v in durations:
        nxt.add(pool.utt[src], seq, t + durations.get(v, 1), ctx, score, src, -1)
        return
    if graph is not None:
        bonus, ctx = graph.forward_one_step(ctx, v)
        score += bonus
    nxt.add(pool.utt[src], seq + (v,), t + 1, ctx, score, src, v)


def _next_pool(net: TransducerNet, pool: _Pool, nxt: _Candidates, frame: int,
               beam: int) -> _Pool:
    """Cut the hypotheses entering ``frame`` to the beam per utterance, gather the predictor
    rows, and run one predictor step for every hypothesis that took a label."""
    entering: Dict[int, List[int]] = {}
    for j, row in enumerate(nxt.rows):
        if row[2] == frame:
            entering.setdefault(row[0], []).append(j)
    dropped = set()
    for rows in entering.values():
        if len(rows) > beam:
            dropped.update(sorted(rows, key=lambda j: -nxt.rows[j][4])[beam:])
    keep = [row for j, row in enumerate(nxt.rows) if j not in dropped]
    src = np.array([row[5] for row in keep], dtype=np.int64)
    pred = pool.pred[src]
    state = [s[src] for s in pool.state]
    emit = np.array([i for i, row in enumerate(keep) if row[6] >= 0], dtype=np.int64)
    if emit.size:
        tokens = np.array([keep[i][6] for i in emit], dtype=np.int64)
        new_pred, new_state = net.predictor_step(tokens, [s[emit] for s in state])
        pred[emit] = new_pred
        state = [_replaced(s, emit, n) for s, n in zip(state, new_state)]
    columns = list(zip(*keep)) if keep else [[]] * 5
    return _Pool(list(columns[0]), list(columns[1]), list(columns[2]), list(columns[3]),
                 list(columns[4]), pred, state)
