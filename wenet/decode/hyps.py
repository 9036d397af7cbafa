"""Hypothesis types shared by the searches, and the one way to take an n-best's winner."""
from __future__ import annotations

from typing import List, Sequence, Tuple

NEG_INF = float("-inf")

Hyp = Tuple[int, ...]
NBest = List[Tuple[Hyp, float]]  # (tokens, log score), best first


def best_hyps(nbests: Sequence[NBest]) -> List[List[int]]:
    """The first (best) hypothesis of each n-best; ``[]`` for an empty n-best."""
    return [list(nbest[0][0]) if nbest else [] for nbest in nbests]
