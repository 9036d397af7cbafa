"""Attention-decoder searches: autoregressive beam search, and rescoring of a first
pass's n-best (CTC prefix beam or transducer beam) with the decoder (WeNet 2.x semantics).

The decoder honours (docs/interfaces.md; sos == eos == vocab_size - 1, encoder
masks ``bool Tensor[B, 1, T]``):

* ``decoder(memory, memory_mask, ys_in_pad, ys_in_lens, r_ys_in_pad, reverse_weight)
  -> (l2r_logits[B, L, V], r2l_logits[B, L, V] or unused, olens)``
* ``decoder.forward_one_step(memory, memory_mask, tgt, tgt_mask, cache)
  -> (log_probs[B, V] of the last position, new_cache)``, where the cache is a
  tensor or a list of tensors whose first dimension is the batch.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from wenet.decode.context_graph import ContextGraph
from wenet.decode.hyps import NEG_INF, Hyp, NBest
from wenet.utils.mask import make_non_pad_mask


def _select_cache(cache, index: torch.Tensor):
    """The decoder cache's batch rows reordered to follow the surviving beams."""
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
    if reverse_weight > 0 and r_x.dim() != 3:
        raise ValueError(f"reverse_weight {reverse_weight} needs a right-to-left decoder "
                         f"(decoder: bitransformer); {type(decoder).__name__} has none")
    positions = make_non_pad_mask(lens + 1, L).float()  # hyp tokens and the final eos

    def seq_score(logits: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return (logp.gather(2, tgt.unsqueeze(2)).squeeze(2) * positions).sum(dim=1)

    l2r = seq_score(l_x, target)
    r2l = seq_score(r_x, r_target) if reverse_weight > 0 else torch.zeros_like(l2r)
    return l2r, r2l


def attention_rescoring(decoder, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                        nbests: Sequence[NBest], sos: int, eos: int,
                        first_pass_weight: float = 0.0,
                        reverse_weight: float = 0.0,
                        context_graph: Optional[ContextGraph] = None
                        ) -> List[Tuple[List[int], float]]:
    """Rescore each utterance's first-pass n-best with the attention decoder (WeNet 2.x).

    ``score = l2r * (1 - reverse_weight) + r2l * reverse_weight
    + first_pass_weight * first_pass (+ context_graph.score(hyp))``, where
    ``first_pass`` is the n-best's own score (the CTC prefix score for
    ``attention_rescoring``, the transducer beam score for
    ``rnnt_beam_attn_rescoring``; a first pass biased with the same graph has the
    bonus in it too, so it then counts ``1 + first_pass_weight`` times, and without
    a graph in the rescoring it counts only ``first_pass_weight`` times).  The
    hotword bonus is the one a finished hypothesis keeps (:meth:`ContextGraph.score`).
    The argmax per utterance wins (first
    one on ties).  All hypotheses of the batch go through one decoder call.  An
    utterance with an empty n-best yields ``([], -inf)``.
    """
    flat: List[Hyp] = []
    owner: List[int] = []
    first_pass: List[float] = []
    for b, nbest in enumerate(nbests):
        for hyp, s in nbest:
            flat.append(tuple(hyp))
            owner.append(b)
            first_pass.append(s)
    out: List[Tuple[List[int], float]] = [([], NEG_INF) for _ in nbests]
    if not flat:
        return out
    utt_index = torch.tensor(owner, dtype=torch.long, device=encoder_out.device)
    l2r, r2l = score_hyps(decoder, encoder_out, encoder_mask, flat, utt_index, sos, eos,
                          reverse_weight)
    total = l2r * (1.0 - reverse_weight) + r2l * reverse_weight
    total = total + first_pass_weight * torch.tensor(first_pass, device=total.device)
    if context_graph is not None:
        bonus = [context_graph.score(hyp) for hyp in flat]
        total = total + torch.tensor(bonus, device=total.device)
    total = total.tolist()
    chosen = [False] * len(nbests)
    for h, b in enumerate(owner):
        if not chosen[b] or total[h] > out[b][1]:
            out[b] = (list(flat[h]), total[h])
            chosen[b] = True
    return out
