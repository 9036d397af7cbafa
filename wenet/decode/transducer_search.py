"""Transducer searches: batched greedy search (multi-blank aware) and modified beam search.

``model`` is anything with the transducer decoding interface (an eager
TransducerModel or its TorchScript export): ``project_encoder``,
``predictor_init_state``, ``forward_predictor_step``, ``forward_joint_step``,
``blank_symbol``, ``big_blank_ids``, ``big_blank_durations``.  Scores are sums
of the joint's log-softmax over the transitions taken.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from wenet.decode.search import NBest, attention_rescoring

TRANSDUCER_MODES = ("rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring")


class GreedyResult(NamedTuple):
    hyps: List[List[int]]
    scores: List[float]       # log-probability of the single alignment found
    joint_evals: int          # joint network evaluations (one per utterance and step)


def _scatter_rows(dst: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
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
        merged: Dict[Tuple[int, ...], int] = {}
        new_seqs: List[Tuple[int, ...]] = []
        new_scores: List[torch.Tensor] = []
        src: List[int] = []
        token: List[int] = []
        for s, k in zip(top_scores, top.tolist()):
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
        seqs, scores = new_seqs, torch.stack(new_scores)
    order = scores.argsort(descending=True).tolist()
    return [(seqs[i], float(scores[i])) for i in order]


@torch.no_grad()
def decode_transducer(model, encoder_out: torch.Tensor, encoder_mask: torch.Tensor, mode: str,
                      beam_size: int = 4, max_sym_per_frame: int = 1,
                      transducer_weight: float = 0.0, reverse_weight: float = 0.0,
                      stats: Optional[Dict[str, int]] = None) -> List[List[int]]:
    """Best token sequence per utterance for one transducer ``mode`` (see TRANSDUCER_MODES).

    ``stats``, when given, accumulates ``encoder_frames`` and, for greedy search,
    ``joint_evals`` (what multi-blank decoding saves).

    ``rnnt_beam_attn_rescoring`` rescores the beam search n-best with the
    attention decoder (as attention_rescoring does the CTC n-best):
    ``decoder score + transducer_weight * beam search score``.
    """
    enc_lens = encoder_mask.reshape(encoder_out.size(0), -1).sum(dim=1)
    if stats is not None:
        stats["encoder_frames"] = stats.get("encoder_frames", 0) + int(enc_lens.sum())
    if mode == "rnnt_greedy_search":
        result = rnnt_greedy_search(model, encoder_out, enc_lens, max_sym_per_frame)
        if stats is not None:
            stats["joint_evals"] = stats.get("joint_evals", 0) + result.joint_evals
        return result.hyps
    if mode not in TRANSDUCER_MODES:
        raise ValueError(f"unknown transducer mode {mode!r}; known: {list(TRANSDUCER_MODES)}")
    nbests = rnnt_beam_search(model, encoder_out, enc_lens, beam_size)
    if mode == "rnnt_beam_search":
        return [list(nb[0][0]) if nb else [] for nb in nbests]
    if model.attention_weight <= 0:
        raise ValueError("rnnt_beam_attn_rescoring needs a model with an attention decoder")
    res = attention_rescoring(model.decoder, encoder_out, encoder_mask, nbests, model.sos,
                              model.eos, transducer_weight, reverse_weight)
    return [hyp for hyp, _ in res]
