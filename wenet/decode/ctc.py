"""CTC searches: greedy best path and prefix beam search (WeNet 2.x semantics).

Both take CTC log-probabilities ``[B, T, V]`` and the valid frame counts ``[B]``;
blank id 0 unless told otherwise.  The prefix beam search optionally biases towards
hotwords with a :class:`~wenet.decode.context_graph.ContextGraph`.
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from wenet.decode.context_graph import ContextGraph
from wenet.decode.hyps import NEG_INF, Hyp, NBest
from wenet.utils.mask import make_non_pad_mask


@torch.no_grad()
def ctc_greedy_search(ctc_logprobs: torch.Tensor, lengths: torch.Tensor,
                      blank_id: int = 0) -> List[List[int]]:
    """Best path: argmax per frame, merge repeats, drop blanks (whole batch at once)."""
    best = ctc_logprobs.argmax(dim=-1)  # (B, T)
    valid = make_non_pad_mask(lengths, best.size(1))
    best = best.masked_fill(~valid, blank_id)
    prev = torch.cat([torch.full_like(best[:, :1], blank_id), best[:, :-1]], dim=1)
    keep = (best != blank_id) & (best != prev)
    return [row[k].tolist() for row, k in zip(best, keep)]


class _Beam(NamedTuple):
    """The prefix beams of a batch as ``[B, N]`` tensors (the prefix tuples live aside).

    ``pb``/``pnb``: log scores of the alignments ending in a blank / in the last
    token; ``last``: the prefix's last token (-1 for the empty prefix);
    ``parent``: beam index of the prefix without its last token (-1 if not in the beam).
    With a context graph, ``cstate``: the prefix's graph state, ``cscore``: the
    bonus it has collected (both ``None`` without one).
    """
    pb: torch.Tensor
    pnb: torch.Tensor
    last: torch.Tensor
    parent: torch.Tensor
    cstate: Optional[torch.Tensor] = None
    cscore: Optional[torch.Tensor] = None


# A context graph's dense tables (ContextGraph.tables): column, next state, bonus, final.
_Tables = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@torch.no_grad()
def ctc_prefix_beam_search(ctc_logprobs: torch.Tensor, lengths: torch.Tensor,
                           beam_size: int, blank_id: int = 0,
                           blank_skip_threshold: Optional[float] = 0.999,
                           context_graph: Optional[ContextGraph] = None) -> List[NBest]:
    """CTC prefix beam search; returns the n-best ``(prefix, log score)`` per utterance.

    Each prefix carries two log scores, for the alignments that end in a blank
    (``pb``) and in its last token (``pnb``); its score is their log-sum.  Per
    frame only the ``beam_size`` most likely tokens are expanded, and the
    ``beam_size`` best prefixes survive.  When no pruning happens (beam at
    least the number of reachable prefixes, top-k covering the vocabulary,
    ``blank_skip_threshold=None``) the scores are exact sums over alignments.

    Blank skipping: a frame whose blank probability exceeds
    ``blank_skip_threshold`` is treated as a pure blank frame (every prefix
    moves to its blank-ending state, non-blank tokens of that frame are
    dropped).  It keeps repeats apart correctly (``a <skip> a`` still gives
    ``a a``) and only drops at most ``1 - threshold`` of the frame's mass; the
    prefix order is unchanged by such a frame.  ``None`` disables it.

    Hotword biasing (``context_graph``): each prefix also carries its graph
    state and collected bonus (a function of the prefix, so merging prefixes
    stays exact); prefixes are ranked by CTC score plus bonus, and the returned
    scores are CTC score plus the bonus the finished prefix keeps
    (:meth:`ContextGraph.score`).  The CTC parts ``pb``/``pnb`` stay unbiased.

    The beams of all utterances live in ``[B, beam]`` tensors and every frame
    is one set of batched tensor operations; only the prefix tuples are Python.
    """
    B, T, V = ctc_logprobs.shape
    N = beam_size
    device = ctc_logprobs.device
    lp_all = ctc_logprobs.float()
    # Batch-wide per-frame decisions, computed once up front.
    valid = make_non_pad_mask(lengths.to(device), T)  # (B, T)
    if blank_skip_threshold is not None:
        skip = lp_all[:, :, blank_id] > math.log(blank_skip_threshold)
    else:
        skip = torch.zeros(B, T, dtype=torch.bool, device=device)
    topk_lp, topk_ids = lp_all.topk(min(beam_size, V), dim=-1)  # (B, T, K)
    full = valid & ~skip  # frames that need the full update

    beam = initial_beam(B, N, device, context_graph is not None)
    tables = None if context_graph is None else context_graph.tables(V, device)
    prefixes: List[List[Optional[Hyp]]] = [[()] + [None] * (N - 1) for _ in range(B)]
    for t in range(T):
        total = torch.logaddexp(beam.pb, beam.pnb)
        skip_t = valid[:, t] & skip[:, t]
        if bool(skip_t.any()):
            lp_blank = lp_all[:, t, blank_id].unsqueeze(1)
            s = skip_t.unsqueeze(1)
            beam = beam._replace(pb=torch.where(s, total + lp_blank, beam.pb),
                                 pnb=torch.where(s, NEG_INF, beam.pnb))
        if bool(full[:, t].any()):
            beam = prefix_step(beam, total, prefixes, topk_lp[:, t], topk_ids[:, t],
                                full[:, t], V, blank_id, tables)
    return nbest_lists(beam, prefixes, tables)


def initial_beam(B: int, N: int, device: torch.device, biased: bool) -> _Beam:
    """Every utterance's beam holding just the empty prefix (bonus 0 at the root)."""
    pb = torch.full((B, N), NEG_INF, device=device)
    pb[:, 0] = 0.0
    beam = _Beam(pb, torch.full((B, N), NEG_INF, device=device),
                 torch.full((B, N), -1, dtype=torch.long, device=device),
                 torch.full((B, N), -1, dtype=torch.long, device=device))
    if biased:
        beam = beam._replace(cstate=torch.zeros(B, N, dtype=torch.long, device=device),
                             cscore=torch.zeros(B, N, device=device))
    return beam


def nbest_lists(beam: _Beam, prefixes: List[List[Optional[Hyp]]],
                 tables: Optional[_Tables] = None) -> List[NBest]:
    """Each utterance's live prefixes with their scores (plus the bonus each
    keeps, with a context graph), best first."""
    total = torch.logaddexp(beam.pb, beam.pnb)
    if tables is not None:
        total = total + beam.cscore + tables[3][beam.cstate]
    total = total.tolist()
    results: List[NBest] = []
    for b, row in enumerate(prefixes):
        nbest = [(row[i], total[b][i]) for i in range(len(row))
                 if row[i] is not None and total[b][i] > NEG_INF]
        nbest.sort(key=lambda x: -x[1])
        results.append(nbest)
    return results


def prefix_step(beam: _Beam, total: torch.Tensor, prefixes: List[List[Optional[Hyp]]],
                 lp_k: torch.Tensor, ids_k: torch.Tensor, active: torch.Tensor,
                 V: int, blank_id: int, tables: Optional[_Tables] = None) -> _Beam:
    """One full frame of prefix beam search for the utterances in ``active``.

    ``lp_k``/``ids_k`` [B, K]: the frame's top-k log-probabilities and tokens;
    ``tables``: the context graph's, if biasing.  Updates ``prefixes`` in place
    and returns the new beam tensors.
    """
    B, N = beam.pb.shape
    K = ids_k.size(1)
    # Log-probability of each token on this frame, -inf outside the top-k.
    lp = torch.full((B, V), NEG_INF, device=beam.pb.device).scatter(1, ids_k, lp_k)
    stay_pb, stay_pnb, lp_last = _stay_scores(beam, total, lp, blank_id)
    ext = _extension_scores(beam, total, lp_k, ids_k, V, blank_id)
    cand = torch.cat([torch.logaddexp(stay_pb, stay_pnb), ext.reshape(B, N * K)], dim=1)
    if tables is not None:
        ext_state, ext_score = _context_extensions(beam, ids_k, tables)
        cand = cand + torch.cat([beam.cscore, ext_score], dim=1)
    _, sel = cand.topk(N, dim=1)  # (B, N), best first
    is_stay = sel < N
    src = torch.where(is_stay, sel, (sel - N) // K)
    tok = ids_k.gather(1, ((sel - N) % K).masked_fill(is_stay, 0))
    new_pb = torch.where(is_stay, stay_pb.gather(1, src), NEG_INF)
    new_pnb = torch.where(is_stay, stay_pnb.gather(1, src), ext.reshape(B, N * K).gather(
        1, (sel - N).clamp(min=0)))
    new_last = torch.where(is_stay, beam.last.gather(1, src), tok)
    a = active.unsqueeze(1)
    new_pb, new_pnb = torch.where(a, new_pb, beam.pb), torch.where(a, new_pnb, beam.pnb)
    new_last = torch.where(a, new_last, beam.last)
    alive = (torch.logaddexp(new_pb, new_pnb) > NEG_INF).tolist()
    new_parent = _advance_prefixes(prefixes, beam.parent, active, src, is_stay, tok, alive)
    if tables is None:
        return _Beam(new_pb, new_pnb, new_last, new_parent)
    ext_i = (sel - N).clamp(min=0)
    new_cstate = torch.where(is_stay, beam.cstate.gather(1, src), ext_state.gather(1, ext_i))
    new_cscore = torch.where(is_stay, beam.cscore.gather(1, src), ext_score.gather(1, ext_i))
    return _Beam(new_pb, new_pnb, new_last, new_parent,
                 torch.where(a, new_cstate, beam.cstate), torch.where(a, new_cscore, beam.cscore))


def _context_extensions(beam: _Beam, ids_k: torch.Tensor, tables: _Tables
                        ) -> Tuple[torch.Tensor, torch.Tensor]:
    """[B, N*K] graph state and collected bonus of every prefix + top-k token."""
    column, next_state, bonus, _ = tables
    B, N = beam.cstate.shape
    col = column[ids_k].unsqueeze(1)         # (B, 1, K)
    state = beam.cstate.unsqueeze(2)         # (B, N, 1)
    ext_state = next_state[state, col]       # (B, N, K)
    ext_score = beam.cscore.unsqueeze(2) + bonus[state, col]
    return ext_state.reshape(B, -1), ext_score.reshape(B, -1)


def _stay_scores(beam: _Beam, total: torch.Tensor, lp: torch.Tensor, blank_id: int):
    """Scores of each prefix staying as it is: ``(pb, pnb, lp of its last token)``.

    It stays via a blank, by repeating its last token, or, when its parent is in
    the beam too, by the parent taking the last token (merged here, not extended).
    """
    last_c = beam.last.clamp(min=0)
    lp_last = lp.gather(1, last_c).masked_fill(beam.last < 0, NEG_INF)  # (B, N)
    stay_pb = total + lp[:, blank_id:blank_id + 1]
    stay_pnb = beam.pnb + lp_last
    has_parent = beam.parent >= 0
    par = beam.parent.clamp(min=0)
    par_pb, par_total = beam.pb.gather(1, par), total.gather(1, par)
    par_last = beam.last.gather(1, par)
    from_parent = torch.where(par_last == beam.last, par_pb, par_total) + lp_last
    stay_pnb = torch.logaddexp(stay_pnb, from_parent.masked_fill(~has_parent, NEG_INF))
    return stay_pb, stay_pnb, lp_last


def _extension_scores(beam: _Beam, total: torch.Tensor, lp_k: torch.Tensor,
                      ids_k: torch.Tensor, V: int, blank_id: int) -> torch.Tensor:
    """[B, N, K] scores of prefix + top-k token; -inf for blanks and for extensions
    already in the beam (those were merged into the stay scores)."""
    B, N = beam.pb.shape
    K = ids_k.size(1)
    rows = torch.arange(B, device=beam.pb.device)
    has_parent = beam.parent >= 0
    exists = torch.zeros(B, N + 1, V, dtype=torch.bool, device=beam.pb.device)
    exists[rows.unsqueeze(1).expand(B, N), torch.where(has_parent, beam.parent, N),
           beam.last.clamp(min=0)] = True
    ext_exists = exists[:, :N].gather(2, ids_k.unsqueeze(1).expand(B, N, K))  # (B, N, K)
    same = ids_k.unsqueeze(1) == beam.last.unsqueeze(2)
    ext = torch.where(same, beam.pb.unsqueeze(2), total.unsqueeze(2)) + lp_k.unsqueeze(1)
    return ext.masked_fill(ext_exists | (ids_k == blank_id).unsqueeze(1), NEG_INF)


def _advance_prefixes(prefixes: List[List[Optional[Hyp]]], parent: torch.Tensor,
                      active: torch.Tensor, src: torch.Tensor, is_stay: torch.Tensor,
                      tok: torch.Tensor, alive: List[List[bool]]) -> torch.Tensor:
    """Rebuild the prefix tuples of the active utterances (in place) from the chosen
    sources; returns the new parent links [B, N]."""
    B, N = parent.shape
    src_l, stay_l, tok_l = src.tolist(), is_stay.tolist(), tok.tolist()
    parent_rows = []
    for b in range(B):
        if not bool(active[b]):
            parent_rows.append(parent[b].tolist())
            continue
        old = prefixes[b]
        new: List[Optional[Hyp]] = []
        for i in range(N):
            if not alive[b][i]:
                new.append(None)
                continue
            p = old[src_l[b][i]]
            new.append(p if stay_l[b][i] else p + (tok_l[b][i],))
        index: Dict[Hyp, int] = {h: i for i, h in enumerate(new) if h is not None}
        parent_rows.append([index.get(h[:-1], -1) if h else -1 for h in new])
        prefixes[b] = new
    return torch.tensor(parent_rows, dtype=torch.long, device=parent.device)
