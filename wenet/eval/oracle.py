"""N-best oracle error rate: how good the best hypothesis of each n-best list is.

The oracle at depth ``N`` picks, for every utterance, the hypothesis among the first
``N`` of its list with the fewest errors against the reference (the earliest on ties)
and scores the picks as ``compute-wer`` would.  Depth 1 is the 1-best.  The gap
between the 1-best and a deep oracle is what any rescoring of those lists could still
gain; an oracle close to the 1-best says the lists lack the right answer, so the
search or the model has to change, not the rescoring.

N-best lists are ``recognize.py --nbest N`` output: JSON lines
``{"key": ..., "nbest": [{"text": ..., ...}, ...]}``, best first.
"""
from __future__ import annotations

import json
from typing import Dict, List, Sequence, Tuple

from wenet.eval.wer import Counts, read_transcripts, align, normalize
from wenet.utils.file_utils import text_lines


def read_nbest_texts(path: str) -> Dict[str, List[str]]:
    """{key: hypothesis texts, best first} of an n-best JSON-lines file; a malformed
    line or a duplicate key is a ValueError naming the file and line."""
    out: Dict[str, List[str]] = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = record["key"]
            texts = [str(h["text"]) for h in record["nbest"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{lineno}: not an n-best line "
                             f"{{\"key\": ..., \"nbest\": [{{\"text\": ...}}, ...]}}: {e}") from None
        if key in out:
            raise ValueError(f"{path}:{lineno}: duplicate key '{key}'")
        out[key] = texts
    return out


def oracle_counts(refs: Dict[str, List[str]], nbests: Dict[str, List[List[str]]],
                  depths: Sequence[int]) -> Dict[int, Tuple[Counts, float]]:
    """{depth: (counts of the oracle picks, mean 1-based rank of the picks)}; an utterance
    without an n-best (or with an empty one) counts as all deletions."""
    result: Dict[int, Tuple[Counts, float]] = {}
    for depth in depths:
        if depth < 1:
            raise ValueError(f"oracle depths start at 1, got {depth}")
        total, rank_sum = Counts(), 0
        for key, ref in refs.items():
            best, best_rank = None, 1
            for rank, hyp in enumerate(nbests.get(key, [])[:depth], 1):
                counts, _ = align(ref, hyp)
                errors = counts.s + counts.d + counts.i
                if best is None or errors < best.s + best.d + best.i:
                    best, best_rank = counts, rank
            if best is None:
                best, _ = align(ref, [])
            total.add(best)
            rank_sum += best_rank
        result[depth] = (total, rank_sum / max(len(refs), 1))
    return result


def nbest_oracle(ref_path: str, nbest_path: str, depths: Sequence[int],
                 case_sensitive: bool = False) -> Dict[int, Tuple[Counts, float]]:
    """:func:`oracle_counts` of a ``key text`` reference file and an n-best file."""
    refs = {k: normalize(v, set(), case_sensitive, True)
            for k, v in read_transcripts(ref_path, False).items()}
    nbests = {k: [normalize(t.split(), set(), case_sensitive, True) for t in texts]
              for k, texts in read_nbest_texts(nbest_path).items()}
    return oracle_counts(refs, nbests, depths)
