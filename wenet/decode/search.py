"""Decoding searches over a CTC head and an attention decoder (WeNet 2.x semantics).

Pure algorithms: they take log-probabilities, encoder outputs and a decoder
object, never a whole model, so they can be tested with tiny stand-ins.

Conventions (docs/interfaces.md): blank id 0, ``sos == eos == vocab_size - 1``,
encoder masks are ``bool Tensor[B, 1, T]``.  The decoder honours

* ``decoder(memory, memory_mask, ys_in_pad, ys_in_lens, r_ys_in_pad, reverse_weight)
  -> (l2r_logits[B, L, V], r2l_logits[B, L, V] or unused, olens)``
* ``decoder.forward_one_step(memory, memory_mask, tgt, tgt_mask, cache)
  -> (log_probs[B, V] of the last position, new_cache)``, where the cache is a
  tensor or a list of tensors whose first dimension is the batch.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch

NEG_INF = float("-inf")

Hyp = Tuple[int, ...]
NBest = List[Tuple[Hyp, float]]


def _lengths_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """bool [B, max_len], True on valid (non-padding) frames."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


@torch.no_grad()
def ctc_greedy_search(ctc_logprobs: torch.Tensor, lengths: torch.Tensor,
                      blank_id: int = 0) -> List[List[int]]:
    """Best path: argmax per frame, merge repeats, drop blanks (whole batch at once)."""
    best = ctc_logprobs.argmax(dim=-1)  # (B, T)
    valid = _lengths_mask(lengths, best.size(1))
    best = best.masked_fill(~valid, blank_id)
    prev = torch.cat([torch.full_like(best[:, :1], blank_id), best[:, :-1]], dim=1)
    keep = (best != blank_id) & (best != prev)
    return [row[k].tolist() for row, k in zip(best, keep)]


@torch.no_grad()
def ctc_prefix_beam_search(ctc_logprobs: torch.Tensor, lengths: torch.Tensor,
                           beam_size: int, blank_id: int = 0,
                           blank_skip_threshold: Optional[float] = 0.999) -> List[NBest]:
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

    The beams of all utterances live in ``[B, beam]`` tensors and every frame
    is one set of batched tensor operations; only the prefix tuples are Python.
    """
    B, T, V = ctc_logprobs.shape
    N = beam_size
    K = min(beam_size, V)
    device = ctc_logprobs.device
    lp_all = ctc_logprobs.float()
    # Batch-wide per-frame decisions, computed once up front.
    valid = _lengths_mask(lengths.to(device), T)  # (B, T)
    if blank_skip_threshold is not None:
        skip = lp_all[:, :, blank_id] > math.log(blank_skip_threshold)
    else:
        skip = torch.zeros(B, T, dtype=torch.bool, device=device)
    topk_lp, topk_ids = lp_all.topk(K, dim=-1)  # (B, T, K)
    full = valid & ~skip  # frames that need the full update

    pb = torch.full((B, N), NEG_INF, device=device)
    pnb = torch.full((B, N), NEG_INF, device=device)
    pb[:, 0] = 0.0
    last = torch.full((B, N), -1, dtype=torch.long, device=device)
    parent = torch.full((B, N), -1, dtype=torch.long, device=device)
    prefixes: List[List[Optional[Hyp]]] = [[()] + [None] * (N - 1) for _ in range(B)]
    rows = torch.arange(B, device=device)

    for t in range(T):
        total = torch.logaddexp(pb, pnb)
        skip_t = valid[:, t] & skip[:, t]
        if bool(skip_t.any()):
            lp_blank = lp_all[:, t, blank_id].unsqueeze(1)
            s = skip_t.unsqueeze(1)
            pb, pnb = torch.where(s, total + lp_blank, pb), torch.where(s, NEG_INF, pnb)
        full_t = full[:, t]
        if not bool(full_t.any()):
            continue
        pb, pnb, last, parent = _prefix_step(
            pb, pnb, total, last, parent, prefixes, topk_lp[:, t], topk_ids[:, t],
            full_t, V, blank_id, rows)

    total = torch.logaddexp(pb, pnb).tolist()
    results: List[NBest] = []
    for b in range(B):
        nbest = [(prefixes[b][i], total[b][i]) for i in range(N)
                 if prefixes[b][i] is not None and total[b][i] > NEG_INF]
        nbest.sort(key=lambda x: -x[1])
        results.append(nbest)
    return results


def _prefix_step(pb, pnb, total, last, parent, prefixes, lp_k, ids_k, active,
                 V: int, blank_id: int, rows):
    """One full frame of prefix beam search for the utterances in ``active``."""
    B, N = pb.shape
    K = ids_k.size(1)
    # Log-probability of each token on this frame, -inf outside the top-k.
    lp = torch.full((B, V), NEG_INF, device=pb.device).scatter(1, ids_k, lp_k)
    last_c = last.clamp(min=0)
    lp_last = lp.gather(1, last_c).masked_fill(last < 0, NEG_INF)  # (B, N)
    # Staying on the same prefix: via blank, or by repeating its last token.
    stay_pb = total + lp[:, blank_id:blank_id + 1]
    stay_pnb = pnb + lp_last
    # A prefix whose parent is also in the beam also receives parent + last token.
    has_parent = parent >= 0
    par = parent.clamp(min=0)
    par_pb, par_total, par_last = pb.gather(1, par), total.gather(1, par), last.gather(1, par)
    from_parent = torch.where(par_last == last, par_pb, par_total) + lp_last
    stay_pnb = torch.logaddexp(stay_pnb, from_parent.masked_fill(~has_parent, NEG_INF))
    # Extensions p + c that are not already in the beam (those were merged above).
    exists = torch.zeros(B, N + 1, V, dtype=torch.bool, device=pb.device)
    exists[rows.unsqueeze(1).expand(B, N), torch.where(has_parent, parent, N), last_c] = True
    ext_exists = exists[:, :N].gather(2, ids_k.unsqueeze(1).expand(B, N, K))  # (B, N, K)
    same = ids_k.unsqueeze(1) == last.unsqueeze(2)
    ext = torch.where(same, pb.unsqueeze(2), total.unsqueeze(2)) + lp_k.unsqueeze(1)
    ext = ext.masked_fill(ext_exists | (ids_k == blank_id).unsqueeze(1), NEG_INF)
    cand = torch.cat([torch.logaddexp(stay_pb, stay_pnb), ext.reshape(B, N * K)], dim=1)
    _, sel = cand.topk(N, dim=1)  # (B, N), best first
    is_stay = sel < N
    src = torch.where(is_stay, sel, (sel - N) // K)
    tok = ids_k.gather(1, ((sel - N) % K).masked_fill(is_stay, 0))
    new_pb = torch.where(is_stay, stay_pb.gather(1, src), NEG_INF)
    new_pnb = torch.where(is_stay, stay_pnb.gather(1, src), ext.reshape(B, N * K).gather(
        1, (sel - N).clamp(min=0)))
    new_last = torch.where(is_stay, last.gather(1, src), tok)
    a = active.unsqueeze(1)
    new_pb, new_pnb = torch.where(a, new_pb, pb), torch.where(a, new_pnb, pnb)
    new_last = torch.where(a, new_last, last)
    # Prefix tuples and parent links are bookkeeping in Python.
    src_l, stay_l, tok_l = src.tolist(), is_stay.tolist(), tok.tolist()
    alive = (torch.logaddexp(new_pb, new_pnb) > NEG_INF).tolist()
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
    new_parent = torch.tensor(parent_rows, dtype=torch.long, device=pb.device)
    return new_pb, new_pnb, new_last, new_parent


def _select_cache(cache, index: torch.Tensor):
    if cache is None:
        return None
    if isinstance(cache, torch.Tensor):
        return cache.index_select(0, index)
    return [c.index_select(0, index) for c in cache]


@torch.no_grad()
def attention_beam_search(decoder, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                          beam_size: int, sos: int, eos: int,
                          length_penalty: float = 0.0) -> List[Tuple[List[int], float]]:
    """Batched autoregressive beam search with the attention decoder.

    Each utterance decodes at most as many tokens as its encoder has frames
    (the eos counts); a hypothesis ends at ``eos``.  The final choice divides
    each hypothesis' log score by ``length ** length_penalty`` (WeNet's length
    normalisation, length = tokens without sos/eos, at least 1; 0 disables it).
    Returns ``(tokens without sos/eos, score)`` per utterance.
    """
    device = encoder_out.device
    B, Tm, D = encoder_out.shape
    N = beam_size
    R = B * N
    enc_lens = encoder_mask.reshape(B, -1).sum(dim=1)  # (B,)
    memory = encoder_out.unsqueeze(1).expand(B, N, Tm, D).reshape(R, Tm, D)
    memory_mask = encoder_mask.unsqueeze(1).expand(B, N, 1, Tm).reshape(R, 1, Tm)
    max_len = enc_lens.repeat_interleave(N).unsqueeze(1)  # (R, 1)
    hyps = torch.full((R, 1), sos, dtype=torch.long, device=device)
    scores = torch.tensor([0.0] + [NEG_INF] * (N - 1), device=device).repeat(B).unsqueeze(1)
    ended = torch.zeros(R, 1, dtype=torch.bool, device=device)
    cache = None
    base = torch.arange(B, device=device).unsqueeze(1) * N  # (B, 1)
    max_steps = int(enc_lens.max().item()) if B else 0
    for i in range(1, max_steps + 1):
        ended = ended | (max_len < i)
        if bool(ended.all()):
            break
        tgt_mask = torch.tril(torch.ones(i, i, dtype=torch.bool, device=device))
        tgt_mask = tgt_mask.unsqueeze(0).expand(R, i, i)
        logp, cache = decoder.forward_one_step(memory, memory_mask, hyps, tgt_mask, cache)
        k = min(N, logp.size(-1))
        top_lp, top_ids = logp.float().topk(k, dim=-1)  # (R, k)
        # A finished hypothesis extends only by eos, at no cost, once.
        keep_first = torch.zeros_like(top_lp)
        keep_first[:, 1:] = NEG_INF
        top_lp = torch.where(ended, keep_first, top_lp)
        top_ids = torch.where(ended, torch.full_like(top_ids, eos), top_ids)
        cand = (scores + top_lp).view(B, N * k)
        scores, offset = cand.topk(N, dim=1)  # (B, N)
        src = (base + offset // k).view(-1)
        pred = top_ids.view(B, N * k).gather(1, offset).view(-1, 1)
        hyps = torch.cat([hyps.index_select(0, src), pred], dim=1)
        cache = _select_cache(cache, src)
        scores = scores.view(-1, 1)
        ended = ended.index_select(0, src) | (pred == eos)
    scores = scores.view(B, N)
    body = hyps[:, 1:]
    lengths = (body != eos).cumprod(dim=1).sum(dim=1).view(B, N)
    norm = scores / lengths.clamp(min=1).float().pow(length_penalty) if length_penalty else scores
    best = norm.argmax(dim=1)
    out: List[Tuple[List[int], float]] = []
    for b in range(B):
        row = body[b * N + int(best[b])].tolist()
        row = row[:row.index(eos)] if eos in row else row
        out.append((row, float(scores[b, best[b]])))
    return out


@torch.no_grad()
def score_hyps(decoder, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
               hyps: Sequence[Sequence[int]], utt_index: torch.Tensor, sos: int, eos: int,
               reverse_weight: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decoder log scores of many hypotheses in ONE ``decoder.forward`` call.

    ``hyps[h]`` belongs to utterance ``utt_index[h]`` of ``encoder_out``.  The
    left-to-right score is ``sum_j log p(hyp_j | sos, hyp_<j) + log p(eos | ...)``;
    the right-to-left one scores the reversed hypothesis the same way (zeros
    when ``reverse_weight == 0``).  Returns two float tensors of shape [H].
    """
    device = encoder_out.device
    H = len(hyps)
    lens = torch.tensor([len(h) for h in hyps], dtype=torch.long, device=device)
    L = int(lens.max().item()) + 1 if H else 1
    # Inputs: sos + hyp, padded with eos (masked by the lengths, but a valid id).
    ys_in = torch.full((H, L), eos, dtype=torch.long, device=device)
    r_ys_in = torch.full((H, L), eos, dtype=torch.long, device=device)
    target = torch.full((H, L), eos, dtype=torch.long, device=device)
    r_target = torch.full((H, L), eos, dtype=torch.long, device=device)
    ys_in[:, 0] = sos
    r_ys_in[:, 0] = sos
    for h, hyp in enumerate(hyps):
        n = len(hyp)
        if n:
            t = torch.tensor(list(hyp), dtype=torch.long, device=device)
            ys_in[h, 1:n + 1] = t
            target[h, :n] = t
            r_ys_in[h, 1:n + 1] = t.flip(0)
            r_target[h, :n] = t.flip(0)
    memory = encoder_out.index_select(0, utt_index)
    memory_mask = encoder_mask.index_select(0, utt_index)
    l_x, r_x, _ = decoder(memory, memory_mask, ys_in, lens + 1, r_ys_in, reverse_weight)
    positions = _lengths_mask(lens + 1, L).float()  # hyp tokens and the final eos

    def seq_score(logits: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return (logp.gather(2, tgt.unsqueeze(2)).squeeze(2) * positions).sum(dim=1)

    l2r = seq_score(l_x, target)
    r2l = seq_score(r_x, r_target) if reverse_weight > 0 else torch.zeros_like(l2r)
    return l2r, r2l


def attention_rescoring(decoder, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                        nbests: Sequence[NBest], sos: int, eos: int,
                        ctc_weight: float = 0.0,
                        reverse_weight: float = 0.0) -> List[Tuple[List[int], float]]:
    """Rescore each utterance's CTC n-best with the attention decoder (WeNet 2.x).

    ``score = l2r * (1 - reverse_weight) + r2l * reverse_weight + ctc_weight * ctc``;
    the argmax per utterance wins (first one on ties).  All hypotheses of the
    batch go through one decoder call.  An utterance with an empty n-best
    yields ``([], -inf)``.
    """
    flat: List[Hyp] = []
    owner: List[int] = []
    ctc: List[float] = []
    for b, nbest in enumerate(nbests):
        for hyp, s in nbest:
            flat.append(tuple(hyp))
            owner.append(b)
            ctc.append(s)
    out: List[Tuple[List[int], float]] = [([], NEG_INF) for _ in nbests]
    if not flat:
        return out
    utt_index = torch.tensor(owner, dtype=torch.long, device=encoder_out.device)
    l2r, r2l = score_hyps(decoder, encoder_out, encoder_mask, flat, utt_index, sos, eos,
                          reverse_weight)
    total = l2r * (1.0 - reverse_weight) + r2l * reverse_weight
    total = (total + ctc_weight * torch.tensor(ctc, device=total.device)).tolist()
    chosen = [False] * len(nbests)
    for h, b in enumerate(owner):
        if not chosen[b] or total[h] > out[b][1]:
            out[b] = (list(flat[h]), total[h])
            chosen[b] = True
    return out


def tokens_to_text(tokens: Sequence[int], char_dict: Dict[int, str], eos: Optional[int] = None,
                   raw: bool = False) -> str:
    """Token ids → text.

    Default: BPE pieces joined into words (``▁`` marks a word start, becomes a
    space; spaces collapsed).  ``raw=True`` gives WeNet 2.x's output: pieces
    concatenated with no separator, ``▁`` kept.  Stops at ``eos`` if given.
    An id missing from ``char_dict`` is an error naming it.
    """
    pieces: List[str] = []
    for t in tokens:
        if eos is not None and t == eos:
            break
        if t not in char_dict:
            raise KeyError(f"token id {t} is not in the units dictionary")
        pieces.append(char_dict[t])
    text = "".join(pieces)
    if raw:
        return text
    return " ".join(text.replace("\u2581", " ").split())


DECODE_MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")


@torch.no_grad()
def decode_batch(model, feats: torch.Tensor, feats_lengths: torch.Tensor, modes: Sequence[str],
                 beam_size: int = 10, ctc_weight: float = 0.0, reverse_weight: float = 0.0,
                 length_penalty: float = 0.0, decoding_chunk_size: int = -1,
                 num_decoding_left_chunks: int = -1, simulate_streaming: bool = False,
                 blank_skip_threshold: Optional[float] = 0.999) -> Dict[str, List[List[int]]]:
    """Best token sequence per utterance for every mode, from ONE encoder pass.

    ``model`` offers ``encode``, ``ctc_logprobs``, ``decoder``, ``sos`` and
    ``eos`` (docs/interfaces.md).  The CTC prefix beam search runs once when
    both ``ctc_prefix_beam_search`` and ``attention_rescoring`` are asked for.
    """
    unknown = [m for m in modes if m not in DECODE_MODES]
    if unknown:
        raise ValueError(f"unknown decoding mode(s) {unknown}; known: {list(DECODE_MODES)}")
    encoder_out, encoder_mask = model.encode(feats, feats_lengths, decoding_chunk_size,
                                             num_decoding_left_chunks, simulate_streaming)
    enc_lens = encoder_mask.reshape(encoder_out.size(0), -1).sum(dim=1)
    out: Dict[str, List[List[int]]] = {}
    logp = None
    nbests: Optional[List[NBest]] = None
    if any(m != "attention" for m in modes):
        logp = model.ctc_logprobs(encoder_out)
    if "ctc_prefix_beam_search" in modes or "attention_rescoring" in modes:
        nbests = ctc_prefix_beam_search(logp, enc_lens, beam_size,
                                        blank_skip_threshold=blank_skip_threshold)
    for mode in modes:
        if mode == "ctc_greedy_search":
            out[mode] = ctc_greedy_search(logp, enc_lens)
        elif mode == "ctc_prefix_beam_search":
            out[mode] = [list(nb[0][0]) if nb else [] for nb in nbests]
        elif mode == "attention":
            res = attention_beam_search(model.decoder, encoder_out, encoder_mask, beam_size,
                                        model.sos, model.eos, length_penalty)
            out[mode] = [hyp for hyp, _ in res]
        else:
            res = attention_rescoring(model.decoder, encoder_out, encoder_mask, nbests,
                                      model.sos, model.eos, ctc_weight, reverse_weight)
            out[mode] = [hyp for hyp, _ in res]
    return out
