"""Hypothesis types shared by the searches, and the one way to take an n-best's winner."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

NEG_INF = float("-inf")

Hyp = Tuple[int, ...]
NBest = List[Tuple[Hyp, float]]  # (tokens, log score), best first


def best_hyps(nbests: Sequence[NBest]) -> List[List[int]]:
    """The first (best) hypothesis of each n-best; ``[]`` for an empty n-best."""
    return [list(nbest[0][0]) if nbest else [] for nbest in nbests]


def finished_transducer_nbest(pool: Any, B: int, lens: List[int], beam: int,
                              length_norm: bool, graph: Optional[Any]) -> List[NBest]:
    """Each utterance's finished hypotheses of a transducer beam search's pool (its
    parallel lists ``utt``, ``seq``, ``pos``, ``ctx``, ``score``; finished: ``pos`` at the
    utterance's length), the context graph's final bonus added, best first (by score, or
    per token with ``length_norm``). Plain Python: the torch and numpy searches share it."""
    out: List[NBest] = [[] for _ in range(B)]
    for u, seq, pos, ctx, score in zip(pool.utt, pool.seq, pool.pos, pool.ctx, pool.score):
        if pos == lens[u]:
            if graph is not None:
                score += graph.finalize(ctx)[0]
            out[u].append((seq, score))
    for u in range(B):
        key = (lambda h: -h[1] / max(1, len(h[0]))) if length_norm else (lambda h: -h[1])
        out[u] = sorted(out[u], key=key)[:beam]
    return out
