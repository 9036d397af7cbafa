"""Attention rescoring on numpy (``wenet.decode.attention.attention_rescoring``): each
utterance's first-pass n-best (CTC prefix beam or transducer beam) scored by the attention
decoder, one ``decoder.onnx`` call per utterance with all its hypotheses.

    score = l2r * (1 - reverse_weight) + r2l * reverse_weight
            + first_pass_weight * first_pass (+ the hotword bonus the hypothesis keeps)

computed in float32 as the torch function does; the first hypothesis wins ties.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from wenet.decode.context_graph import ContextGraph
from wenet.decode.hyps import NEG_INF, NBest

# (hyps (M, L) sos + tokens padded with eos, hyps_lens (M,), encoder_out (1, T, D))
#   -> (left-to-right log-probs (M, L, V), right-to-left log-probs or a placeholder)
DecoderScores = Callable[[np.ndarray, np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]


def _sequence_scores(logp: np.ndarray, hyps: Sequence[Sequence[int]], eos: int) -> np.ndarray:
    """Sum of each hypothesis' token log-probabilities and the final eos's, float32."""
    out = np.zeros(len(hyps), dtype=np.float32)
    for h, hyp in enumerate(hyps):
        n = len(hyp)
        picked = logp[h, np.arange(n + 1), list(hyp) + [eos]]
        out[h] = picked.sum(dtype=np.float32)
    return out


def rescore_utterance(decoder: DecoderScores, encoder_out: np.ndarray, nbest: NBest,
                      sos: int, eos: int, first_pass_weight: float = 0.0,
                      reverse_weight: float = 0.0,
                      context_graph: Optional[ContextGraph] = None) -> Tuple[List[int], float]:
    """The best hypothesis of one utterance's n-best and its total (module docstring);
    ``encoder_out`` (1, T, D) holds its valid frames only. ``([], -inf)`` for an empty
    n-best."""
    if not nbest:
        return [], NEG_INF
    hyps = [tuple(h) for h, _ in nbest]
    L = max(len(h) for h in hyps) + 1
    ys = np.full((len(hyps), L), eos, dtype=np.int64)
    ys[:, 0] = sos
    for h, hyp in enumerate(hyps):
        ys[h, 1:len(hyp) + 1] = hyp
    lens = np.array([len(h) + 1 for h in hyps], dtype=np.int64)
    score, r_score = decoder(ys, lens, encoder_out)
    l2r = _sequence_scores(score, hyps, eos)
    if reverse_weight > 0:
        if np.ndim(r_score) != 3:
            raise ValueError(f"reverse_weight {reverse_weight} needs a right-to-left decoder; "
                             "this decoder.onnx has none (a bitransformer exported with a "
                             "reverse_weight > 0 has one)")
        r2l = _sequence_scores(r_score, [h[::-1] for h in hyps], eos)
    else:
        r2l = np.zeros_like(l2r)
    total = l2r * (1.0 - reverse_weight) + r2l * reverse_weight
    total = total + first_pass_weight * np.array([s for _, s in nbest], dtype=np.float32)
    if context_graph is not None:
        total = total + np.array([context_graph.score(h) for h in hyps], dtype=np.float32)
    best = int(np.argmax(total))  # the first of equal totals
    return list(hyps[best]), float(total[best])


def attention_rescoring(decoder: DecoderScores, encoder_out: np.ndarray,
                        encoder_lens: Sequence[int], nbests: Sequence[NBest], sos: int,
                        eos: int, first_pass_weight: float = 0.0, reverse_weight: float = 0.0,
                        context_graph: Optional[ContextGraph] = None
                        ) -> List[Tuple[List[int], float]]:
    """:func:`rescore_utterance` of every utterance of a padded batch (B, T, D)."""
    return [rescore_utterance(decoder, encoder_out[b:b + 1, :int(n)], nbest, sos, eos,
                              first_pass_weight, reverse_weight, context_graph)
            for b, (n, nbest) in enumerate(zip(encoder_lens, nbests))]
