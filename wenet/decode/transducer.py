"""Transducer searches: batched greedy search (multi-blank aware) and modified beam search.

``model`` is anything with the transducer decoding interface (an eager
TransducerModel or its TorchScript export): ``project_encoder``,
``predictor_init_state``, ``forward_predictor_step``, ``forward_joint_step``,
``blank_symbol``, ``big_blank_ids``, ``big_blank_durations``.  Scores are sums
of the joint's log-softmax over the transitions taken.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

import torch

from wenet.decode.hyps import NBest


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


@torch.no_grad()
def rnnt_beam_search(model, encoder_out: torch.Tensor, encoder_lens: torch.Tensor,
                     beam_size: int = 4) -> List[NBest]:
    """Modified beam search (icefall): at most one label per frame.

    Per frame every hypothesis either takes the blank (stays) or one label; the
    ``beam_size`` best candidates survive, and candidates with the same token
    sequence are merged by adding their probabilities (log-add).  Big blanks of
    a multi-blank model are not expanded here (every hypothesis advances one
    frame at a time), so their probability mass is simply not used.
    Returns per utterance ``[(tokens, log score)]``, best first.
    """
    results: List[NBest] = []
    for b in range(encoder_out.size(0)):
        n = int(encoder_lens[b])
        results.append(_beam_search_one(model, encoder_out[b, :n], beam_size))
    return results


def _beam_search_one(model, encoder_out: torch.Tensor, beam_size: int) -> NBest:
    """Modified beam search over one utterance's unpadded encoder output [T, D]."""
    device = encoder_out.device
    blank = model.blank_symbol()
    big_ids = model.big_blank_ids()
    enc_proj = model.project_encoder(encoder_out)  # (T, J)
    state = model.predictor_init_state(1)
    pred, state = model.forward_predictor_step(
        torch.full((1,), blank, dtype=torch.long, device=device), state)
    seqs: List[Tuple[int, ...]] = [()]
    scores = torch.zeros(1, dtype=torch.float64, device=device)
    for t in range(enc_proj.size(0)):
        N = len(seqs)
        logits = model.forward_joint_step(enc_proj[t].expand(N, -1), pred)
        logp = torch.log_softmax(logits.float(), dim=-1).double()
        if big_ids:
            logp[:, big_ids] = float("-inf")
        V = logp.size(1)
        cand = (scores.unsqueeze(1) + logp).view(-1)
        top_scores, top = cand.topk(min(beam_size, cand.numel()))
        seqs, new_scores, src, token = _merge_candidates(seqs, top_scores, top.tolist(), V,
                                                         blank)
        src_t = torch.tensor(src, dtype=torch.long, device=device)
        tok_t = torch.tensor(token, dtype=torch.long, device=device)
        pred = pred.index_select(0, src_t)
        state = [s.index_select(0, src_t) for s in state]
        emit = (tok_t != blank).nonzero().squeeze(1)
        if emit.numel() > 0:
            new_pred, new_state = model.forward_predictor_step(
                tok_t.index_select(0, emit), [s.index_select(0, emit) for s in state])
            pred = _scatter_rows(pred, emit, new_pred)
            state = [_scatter_rows(s, emit, x) for s, x in zip(state, new_state)]
        scores = torch.stack(new_scores)
    order = scores.argsort(descending=True).tolist()
    return [(seqs[i], float(scores[i])) for i in order]


def _merge_candidates(seqs: List[Tuple[int, ...]], top_scores: torch.Tensor, top: List[int],
                      V: int, blank: int):
    """The frame's surviving hypotheses from its best ``(beam, token)`` candidates, best
    first; candidates giving the same token sequence are log-added into the first.

    Returns ``(sequences, scores, source beam, token taken)``, one entry per survivor.
    """
    merged: Dict[Tuple[int, ...], int] = {}
    new_seqs: List[Tuple[int, ...]] = []
    new_scores: List[torch.Tensor] = []
    src: List[int] = []
    token: List[int] = []
    for s, k in zip(top_scores, top):
        if s.item() == float("-inf"):
            continue
        i, v = divmod(k, V)
        seq = seqs[i] if v == blank else seqs[i] + (v,)
        if seq in merged:
            j = merged[seq]
            new_scores[j] = torch.logaddexp(new_scores[j], s)
            continue
        merged[seq] = len(new_seqs)
        new_seqs.append(seq)
        new_scores.append(s)
        src.append(i)
        token.append(v)
    return new_seqs, new_scores, src, token
