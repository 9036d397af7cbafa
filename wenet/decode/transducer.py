"""Transducer searches, both batched and multi-blank aware: greedy search and modified
beam search (one joint call per frame for all hypotheses of all utterances).

``model`` is anything with the transducer decoding interface (an eager
TransducerModel or its TorchScript export): ``project_encoder``,
``predictor_init_state``, ``forward_predictor_step``, ``forward_joint_step``,
``blank_symbol``, ``big_blank_ids``, ``big_blank_durations``.  Scores are sums
of the joint's log-softmax over the transitions taken (plus hotword bonuses when
the beam search is given a context graph).
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from wenet.decode.hyps import NEG_INF, Hyp, NBest, finished_transducer_nbest


class GreedyResult(NamedTuple):
    """What rnnt_greedy_search found, per utterance, and what it cost."""
    hyps: List[List[int]]
    scores: List[float]       # log-probability of the single alignment found
    joint_evals: int          # joint network evaluations (one per utterance and step)


def _scatter_rows(dst: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst`` with its ``rows`` replaced by ``src`` (out of place)."""
    return dst.index_copy(0, rows, src)


@torch.no_grad()
def rnnt_greedy_search(model, encoder_out: torch.Tensor, encoder_lens: torch.Tensor,
                       max_sym_per_frame: int = 1) -> GreedyResult:
    """Best transition at every step, the whole batch at once.

    Per frame an utterance emits labels until the joint's argmax is a blank or
    it has emitted ``max_sym_per_frame`` labels.  A big blank of duration d
    (multi-blank) ends the frame and skips the next d - 1 frames: those cost no
    joint evaluation, which ``joint_evals`` counts.
    """
    if max_sym_per_frame < 1:
        raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
    B, T, _ = encoder_out.shape
    device = encoder_out.device
    blank = model.blank_symbol()
    big_ids = model.big_blank_ids()
    durations = model.big_blank_durations()
    enc_proj = model.project_encoder(encoder_out)
    state = model.predictor_init_state(B)
    pred, state = model.forward_predictor_step(
        torch.full((B,), blank, dtype=torch.long, device=device), state)
    hyps: List[List[int]] = [[] for _ in range(B)]
    scores = torch.zeros(B, dtype=torch.float64, device=device)
    skip = torch.zeros(B, dtype=torch.long, device=device)
    lens = encoder_lens.to(device)
    joint_evals = 0
    for t in range(T):
        active = (t < lens) & (skip == 0)
        skip = (skip - 1).clamp(min=0)
        for _ in range(max_sym_per_frame):
            rows = active.nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            logits = model.forward_joint_step(enc_proj[rows, t], pred[rows])
            joint_evals += int(rows.numel())
            logp = torch.log_softmax(logits.float(), dim=-1)
            best_lp, best = logp.max(dim=-1)
            scores = scores.index_add(0, rows, best_lp.double())
            blank_rows = best == blank
            row_skip = skip[rows]
            for i, d in zip(big_ids, durations):  # a big blank skips d - 1 more frames
                hit = best == i
                blank_rows = blank_rows | hit
                row_skip = torch.where(hit, d - 1, row_skip)
            skip = _scatter_rows(skip, rows, row_skip)
            active = _scatter_rows(active, rows, ~blank_rows)
            emit_rows, tokens = rows[~blank_rows], best[~blank_rows]
            if emit_rows.numel() == 0:
                break
            for r, k in zip(emit_rows.tolist(), tokens.tolist()):
                hyps[r].append(k)
            new_pred, new_state = model.forward_predictor_step(
                tokens, [s.index_select(0, emit_rows) for s in state])
            pred = _scatter_rows(pred, emit_rows, new_pred)
            state = [_scatter_rows(s, emit_rows, n) for s, n in zip(state, new_state)]
    return GreedyResult(hyps, scores.tolist(), joint_evals)


class _Pool:
    """The live hypotheses of every utterance of a batch, one row each.

    Row i belongs to utterance ``utt[i]``, has emitted ``seq[i]``, has consumed
    ``pos[i]`` frames (hypotheses of one utterance differ in it after a big blank),
    is in context-graph state ``ctx[i]`` and scores ``score[i]`` (log-probability
    plus biasing bonuses); ``pred``/``state`` hold its predictor output and state.
    """

    def __init__(self, utt: List[int], seq: List[Hyp], pos: List[int], ctx: List[int],
                 score: List[float], pred: torch.Tensor, state: List[torch.Tensor]) -> None:
        self.utt, self.seq, self.pos, self.ctx, self.score = utt, seq, pos, ctx, score
        self.pred, self.state = pred, state


class _Candidates:
    """The next pool under construction: rows keyed by (utt, seq, pos, ctx), merged by log-add."""

    def __init__(self) -> None:
        self.index: Dict[Tuple[int, Hyp, int, int], int] = {}
        self.utt: List[int] = []
        self.seq: List[Hyp] = []
        self.pos: List[int] = []
        self.ctx: List[int] = []
        self.score: List[float] = []
        self.src: List[int] = []     # row of the old pool it continues
        self.token: List[int] = []   # label to feed the predictor, -1 for none

    def add(self, utt: int, seq: Hyp, pos: int, ctx: int, score: float, src: int,
            token: int) -> None:
        key = (utt, seq, pos, ctx)
        j = self.index.get(key)
        if j is not None:  # the same hypothesis by another alignment: add probabilities
            a, b = self.score[j], score
            hi = max(a, b)
            self.score[j] = hi if hi == NEG_INF else hi + math.log1p(math.exp(-abs(a - b)))
            return
        self.index[key] = len(self.utt)
        for name, value in (("utt", utt), ("seq", seq), ("pos", pos), ("ctx", ctx),
                            ("score", score), ("src", src), ("token", token)):
            getattr(self, name).append(value)


@torch.no_grad()
def rnnt_beam_search(model, encoder_out: torch.Tensor, encoder_lens: torch.Tensor,
                     beam_size: int = 4, length_norm: bool = False, context_graph=None,
                     stats: Optional[Dict[str, int]] = None) -> List[NBest]:
    """Modified beam search (icefall) over a whole batch: at most one label per frame.

    All utterances advance together, one joint call per frame for every live
    hypothesis of the batch.  On its frame a hypothesis either takes the blank,
    one label (then moves to the next frame) or, in a multi-blank model, a big
    blank of d frames (then waits until frame t + d; only if t + d <= T).  Per
    utterance the ``beam_size`` best (hypothesis, output) candidates survive;
    hypotheses with the same tokens, frame and context state are merged by adding
    their probabilities, and the hypotheses entering a frame are cut to the beam.

    ``context_graph`` (wenet/decode/context_graph.py): a label's biasing bonus is
    added to its hypothesis' score, the graph's final bonus at the end (candidates
    are chosen on the model score, as icefall).  ``length_norm`` ranks the n-best
    by score per token.  ``stats`` (a dict) gets ``joint_calls`` and ``joint_evals``.
    Returns per utterance ``[(tokens, score)]``, best first.
    """
    B, device = encoder_out.size(0), encoder_out.device
    blank = model.blank_symbol()
    lens = [int(n) for n in encoder_lens.tolist()]
    enc_proj = model.project_encoder(encoder_out)  # (B, T, J)
    state = model.predictor_init_state(B)
    pred, state = model.forward_predictor_step(
        torch.full((B,), blank, dtype=torch.long, device=device), state)
    pool = _Pool(list(range(B)), [()] * B, [0] * B, [0] * B, [0.0] * B, pred, state)
    for t in range(max(lens, default=0)):
        active = [i for i, (u, p) in enumerate(zip(pool.utt, pool.pos)) if p == t < lens[u]]
        if active:
            pool = _step(model, pool, active, enc_proj, t, lens, beam_size, context_graph,
                         stats)
    return finished_transducer_nbest(pool, B, lens, beam_size, length_norm, context_graph)


def _step(model, pool: _Pool, active: List[int], enc_proj: torch.Tensor, t: int,
          lens: List[int], beam: int, graph, stats: Optional[Dict[str, int]]) -> _Pool:
    """One frame: expand the hypotheses on frame ``t``, keep the best, feed the predictor."""
    device = enc_proj.device
    blank = model.blank_symbol()
    rows = torch.tensor(active, dtype=torch.long, device=device)
    utts = [pool.utt[i] for i in active]
    utt_t = torch.tensor(utts, dtype=torch.long, device=device)
    logits = model.forward_joint_step(enc_proj[utt_t, t], pool.pred.index_select(0, rows))
    if stats is not None:
        stats["joint_calls"] = stats.get("joint_calls", 0) + 1
        stats["joint_evals"] = stats.get("joint_evals", 0) + len(active)
    logp = torch.log_softmax(logits.float(), dim=-1).double()
    durations = dict(zip(model.big_blank_ids(), model.big_blank_durations()))
    room = torch.tensor([lens[u] - t for u in utts], device=device)
    for i, d in durations.items():  # a big blank must land on or before the last frame
        logp[:, i] = logp[:, i].masked_fill(room < d, NEG_INF)
    slot, seen = [], {}  # each active row's place among its utterance's active rows
    for u in utts:
        slot.append(seen.get(u, 0))
        seen[u] = slot[-1] + 1
    K, V = max(seen.values()), logp.size(1)
    scores = torch.tensor([pool.score[i] for i in active], dtype=torch.float64, device=device)
    cand = torch.full((len(lens), K, V), NEG_INF, dtype=torch.float64, device=device)
    slot_t = torch.tensor(slot, dtype=torch.long, device=device)
    cand[utt_t, slot_t] = scores.unsqueeze(1) + logp
    top_s, top_i = cand.view(len(lens), -1).topk(min(beam, K * V))
    row_of = {(u, k): r for u, k, r in zip(utts, slot, active)}
    nxt = _Candidates()
    for i in range(len(pool.utt)):  # hypotheses waiting for a later frame stay
        if pool.pos[i] != t or pool.pos[i] >= lens[pool.utt[i]]:
            nxt.add(pool.utt[i], pool.seq[i], pool.pos[i], pool.ctx[i], pool.score[i], i, -1)
    top_s, top_i = top_s.tolist(), top_i.tolist()
    for u in seen:
        for s, k in zip(top_s[u], top_i[u]):
            if s == NEG_INF:
                break
            src = row_of[(u, k // V)]
            _add_candidate(nxt, pool, src, k % V, s, t, blank, durations, graph)
    return _next_pool(model, pool, nxt, t + 1, beam)


def _add_candidate(nxt: _Candidates, pool: _Pool, src: int, v: int, score: float, t: int,
                   blank: int, durations: Dict[int, int], graph) -> None:
    """Row ``src`` followed by output ``v`` (blank, big blank or label) on frame ``t``."""
    seq, ctx = pool.seq[src], pool.ctx[src]
    if v == blank or v in durations:
        nxt.add(pool.utt[src], seq, t + durations.get(v, 1), ctx, score, src, -1)
        return
    if graph is not None:
        bonus, ctx = graph.forward_one_step(ctx, v)
        score += bonus
    nxt.add(pool.utt[src], seq + (v,), t + 1, ctx, score, src, v)


def _next_pool(model, pool: _Pool, nxt: _Candidates, frame: int, beam: int) -> _Pool:
    """Cut the hypotheses entering ``frame`` to the beam per utterance, then gather the
    predictor rows and run one predictor step for every hypothesis that took a label."""
    entering: Dict[int, List[int]] = {}
    for j, (u, p) in enumerate(zip(nxt.utt, nxt.pos)):
        if p == frame:
            entering.setdefault(u, []).append(j)
    dropped = set()
    for rows in entering.values():
        if len(rows) > beam:
            dropped.update(sorted(rows, key=lambda j: -nxt.score[j])[beam:])
    keep = [j for j in range(len(nxt.utt)) if j not in dropped]
    device = pool.pred.device
    src = torch.tensor([nxt.src[j] for j in keep], dtype=torch.long, device=device)
    pred = pool.pred.index_select(0, src)
    state = [s.index_select(0, src) for s in pool.state]
    emit = [i for i, j in enumerate(keep) if nxt.token[j] >= 0]
    if emit:
        emit_t = torch.tensor(emit, dtype=torch.long, device=device)
        tokens = torch.tensor([nxt.token[keep[i]] for i in emit], dtype=torch.long,
                              device=device)
        new_pred, new_state = model.forward_predictor_step(
            tokens, [s.index_select(0, emit_t) for s in state])
        pred = _scatter_rows(pred, emit_t, new_pred)
        state = [_scatter_rows(s, emit_t, x) for s, x in zip(state, new_state)]
    return _Pool([nxt.utt[j] for j in keep], [nxt.seq[j] for j in keep],
                 [nxt.pos[j] for j in keep], [nxt.ctx[j] for j in keep],
                 [nxt.score[j] for j in keep], pred, state)


class TransducerGreedyState:
    """``rnnt_greedy_search`` of one utterance whose projected encoder frames arrive in
    pieces: the predictor state, the labels, the score and a big blank's frames still to
    skip are carried from piece to piece, so feeding all frames in any pieces finds what
    the whole-utterance search finds. ``last_label_frame``: the frame of the latest label
    (-1 before any), for endpointing."""

    def __init__(self, model, max_sym_per_frame: int = 1) -> None:
        if max_sym_per_frame < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
        self.model = model
        self.max_sym_per_frame = max_sym_per_frame
        self.blank = model.blank_symbol()
        self.skip_of = dict(zip(model.big_blank_ids(), model.big_blank_durations()))
        state = model.predictor_init_state(1)
        device = state[0].device if state else torch.device("cpu")
        self.pred, self.state = model.forward_predictor_step(
            torch.full((1,), self.blank, dtype=torch.long, device=device), state)
        self.hyp: List[int] = []
        self.score = 0.0
        self.frames = 0
        self.last_label_frame = -1
        self._skip = 0

    @torch.no_grad()
    def advance(self, enc_proj: torch.Tensor) -> None:
        """Search the next frames: ``enc_proj`` (T, J) from ``model.project_encoder``."""
        for t in range(enc_proj.size(0)):
            if self._skip > 0:  # inside a big blank
                self._skip -= 1
                self.frames += 1
                continue
            for _ in range(self.max_sym_per_frame):
                logits = self.model.forward_joint_step(enc_proj[t:t + 1], self.pred)
                best_lp, best = torch.log_softmax(logits.float(), dim=-1).max(dim=-1)
                self.score += float(best_lp.double())
                token = int(best)
                if token == self.blank:
                    break
                if token in self.skip_of:
                    self._skip = self.skip_of[token] - 1
                    break
                self.hyp.append(token)
                self.last_label_frame = self.frames
                self.pred, self.state = self.model.forward_predictor_step(best, self.state)
            self.frames += 1

    def nbest(self) -> NBest:
        """The one hypothesis with its score."""
        return [(tuple(self.hyp), self.score)]


class TransducerBeamState:
    """``rnnt_beam_search`` (modified beam search) of one utterance whose projected encoder
    frames arrive in pieces: the pool of hypotheses is carried from piece to piece, so the
    n-best after :meth:`finish` equals the whole-utterance search's on the same frames.

    A multi-blank model's big blank of d frames may only be taken where d frames are left,
    which is known only d - 1 frames later: frame t is searched once frame t + D - 1 has
    arrived (D the longest big blank; every frame at once for a standard transducer),
    the rest at :meth:`finish`. ``label_frame[h]``: the frame on which hypothesis ``h``
    first appeared (when its last label was taken), for endpointing and partial results.
    """

    def __init__(self, model, beam_size: int = 4, context_graph=None,
                 length_norm: bool = False) -> None:
        self.model = model
        self.beam_size = beam_size
        self.context_graph = context_graph
        self.length_norm = length_norm
        blank = model.blank_symbol()
        state = model.predictor_init_state(1)
        device = state[0].device if state else torch.device("cpu")
        pred, state = model.forward_predictor_step(
            torch.full((1,), blank, dtype=torch.long, device=device), state)
        self.pool = _Pool([0], [()], [0], [0], [0.0], pred, state)
        self.lookahead = max(model.big_blank_durations(), default=1)
        self.enc_proj: Optional[torch.Tensor] = None   # (1, frames received, J)
        self.searched = 0                              # frames searched
        self.label_frame: Dict[Hyp, int] = {(): -1}

    @property
    def received(self) -> int:
        return 0 if self.enc_proj is None else self.enc_proj.size(1)

    @torch.no_grad()
    def advance(self, enc_proj: torch.Tensor) -> None:
        """Take the next frames ``enc_proj`` (T, J) and search those whose big blanks'
        landing frames are known."""
        chunk = enc_proj.unsqueeze(0)
        self.enc_proj = chunk if self.enc_proj is None else torch.cat([self.enc_proj, chunk], 1)
        self._search_until(self.received - self.lookahead + 1)

    def _search_until(self, end: int) -> None:
        lens = [self.received]
        for t in range(self.searched, end):
            active = [i for i, p in enumerate(self.pool.pos) if p == t < lens[0]]
            if active:
                self.pool = _step(self.model, self.pool, active, self.enc_proj, t, lens,
                                  self.beam_size, self.context_graph, None)
            for seq in self.pool.seq:
                self.label_frame.setdefault(seq, t)
            self.searched = t + 1

    @torch.no_grad()
    def finish(self) -> NBest:
        """Search the frames left and return the n-best, best first (``rnnt_beam_search``'s)."""
        self._search_until(self.received)
        return finished_transducer_nbest(self.pool, 1, [self.received], self.beam_size,
                                         self.length_norm, self.context_graph)[0]

    def partial_nbest(self) -> NBest:
        """The live hypotheses so far (best alignment score of each), best first."""
        best: Dict[Hyp, float] = {}
        for seq, score in zip(self.pool.seq, self.pool.score):
            best[seq] = max(score, best.get(seq, NEG_INF))
        return sorted(best.items(), key=lambda h: -h[1])
