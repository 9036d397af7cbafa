"""One mode's output with its n-best list and scores, for one encoded batch.

``decode_nbest`` runs the registered search of the mode (``MODES``, the same function
``decode`` runs) in a :class:`BatchContext`, then reads the n-best from the shared
results of that context, so nothing the mode computed is computed again:

| mode | n-best (best first) | score |
|---|---|---|
| ``ctc_prefix_beam_search`` | the prefix beam | CTC prefix log-probability |
| ``attention_rescoring`` | the prefix beam, rescored | the rescoring total |
| ``rnnt_beam_search`` | the transducer beam | beam log-probability |
| ``rnnt_beam_attn_rescoring`` | the transducer beam, rescored | the rescoring total |
| ``ctc_greedy_search`` | the best path only | its frame log-probabilities summed |
| ``attention`` | the beam search winner only | decoder log-probability (with eos) |
| ``rnnt_greedy_search`` | the greedy path only | None |

The rescored lists are sorted by the same totals the mode maximises (the stable sort
keeps the mode's first-on-ties choice), so their first entry is the mode's output; the
function checks that the first entry equals what the mode returned.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from wenet.decode.attention import attention_rescoring, score_hyps
from wenet.decode.batch_context import BatchContext
from wenet.decode.options import DecodeOptions
from wenet.decode.hyps import NBest
from wenet.decode.modes import MODES, check_modes

ScoredNBest = List[Tuple[Tuple[int, ...], Optional[float]]]


def _rescored(ctx: BatchContext, nbests: List[NBest], first_pass_weight: float) -> List[NBest]:
    """Every hypothesis's rescoring total (the mode's own formula: each hypothesis is
    rescored as the only candidate of its utterance row, in the same single decoder
    call and order as the mode's), sorted best first."""
    m, o = ctx.model, ctx.options
    owner = [b for b, nb in enumerate(nbests) for _ in nb]
    if not owner:
        return [[] for _ in nbests]
    index = torch.tensor(owner, dtype=torch.long, device=ctx.encoder_out.device)
    singles = [[hyp] for nb in nbests for hyp in nb]
    kwargs: Dict[str, Any] = {"first_pass_weight": first_pass_weight,
                              "reverse_weight": o.reverse_weight}
    if getattr(o, "context_graph", None) is not None:
        kwargs["context_graph"] = o.context_graph
    totals = attention_rescoring(m.decoder, ctx.encoder_out.index_select(0, index),
                                 ctx.encoder_mask.index_select(0, index), singles,
                                 m.sos, m.eos, **kwargs)
    out: List[NBest] = [[] for _ in nbests]
    for b, (hyp, score) in zip(owner, totals):
        out[b].append((tuple(hyp), score))
    return [sorted(nb, key=lambda h: -h[1]) for nb in out]


def _greedy_scores(ctx: BatchContext, best: List[List[int]]) -> ScoredNBest:
    logp, lens = ctx.ctc_logprobs, ctx.encoder_lens
    return [[(tuple(hyp), float(logp[b, :int(lens[b])].max(dim=-1).values.sum()))]
            for b, hyp in enumerate(best)]


def _attention_scores(ctx: BatchContext, best: List[List[int]]) -> ScoredNBest:
    m = ctx.model
    index = torch.arange(len(best), device=ctx.encoder_out.device)
    l2r, _ = score_hyps(m.decoder, ctx.encoder_out, ctx.encoder_mask, best, index, m.sos, m.eos)
    return [[(tuple(hyp), float(s))] for hyp, s in zip(best, l2r.tolist())]


_NBEST: Dict[str, Callable[[BatchContext, List[List[int]]], Any]] = {
    "ctc_greedy_search": _greedy_scores,
    "ctc_prefix_beam_search": lambda ctx, best: ctx.ctc_nbest,
    "attention_rescoring": lambda ctx, best: _rescored(ctx, ctx.ctc_nbest,
                                                       ctx.options.ctc_weight),
    "attention": _attention_scores,
    "rnnt_greedy_search": lambda ctx, best: [[(tuple(h), None)] for h in best],
    "rnnt_beam_search": lambda ctx, best: ctx.transducer_nbest,
    "rnnt_beam_attn_rescoring": lambda ctx, best: _rescored(ctx, ctx.transducer_nbest,
                                                            ctx.options.transducer_weight),
}


def _first_is_best(nbest: ScoredNBest, best: List[int], mode: str) -> ScoredNBest:
    """``nbest`` with the mode's output first (it is by construction; a mismatch is logged
    and repaired rather than returned)."""
    if nbest and list(nbest[0][0]) == best:
        return nbest
    logging.warning("%s: n-best list does not start with the mode's output; reordered", mode)
    rest = [h for h in nbest if list(h[0]) != best]
    same = [h for h in nbest if list(h[0]) == best]
    return (same[:1] or [(tuple(best), None)]) + rest


@torch.no_grad()
def decode_nbest(model: Any, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                 mode: str, options: DecodeOptions = DecodeOptions(), nbest: int = 1
                 ) -> Tuple[List[List[int]], List[ScoredNBest], BatchContext]:
    """Decode one encoded batch in ``mode``: (the mode's best token ids per utterance,
    up to ``nbest`` scored hypotheses per utterance with the best first, the batch's
    context, whose shared results such as ``ctc_logprobs`` callers may reuse)."""
    check_modes([mode])
    if nbest < 1:
        raise ValueError(f"nbest must be at least 1, got {nbest}")
    ctx = BatchContext(model, encoder_out, encoder_mask, options)
    best = ctx.run(MODES[mode].search).hyps
    lists = _NBEST[mode](ctx, best) if mode in _NBEST else [[(tuple(h), None)] for h in best]
    lists = [_first_is_best(list(nb), hyp, mode)[:nbest] for nb, hyp in zip(lists, best)]
    return best, lists, ctx
