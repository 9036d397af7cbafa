"""Linear interpolation of word n-gram models, written out as one back-off model.

A small in-domain text (a corpus's own transcripts) and a large general one are best
modelled apart and mixed, ``P(w | h) = sum_i lambda_i P_i(w | h)``, rather than pooled:
pooled counts let the large text swamp the small one.  :func:`mix_ngram_lms` turns the
mixture into a single back-off model, so the result is one ARPA file that any decoder
reads (the static interpolation SRILM's ``ngram -mix-lm`` performs):

- every n-gram stored in any component is stored, with the exact mixture probability
  (a component scores a word outside its vocabulary as 0; each component sums to one
  over its own vocabulary, so the mixture sums to one over the union);
- each context ``h`` gets the back-off weight that makes ``P(. | h)`` sum to one,
  ``(1 - sum_seen P_mix(w | h)) / (1 - sum_seen P_merged(w | h'))``, ``h'`` being ``h``
  without its oldest word.

So stored n-grams score exactly as the mixture does and every context is a
distribution; an n-gram that no component stores is scored through the back-off,
which approximates the mixture there.

:func:`estimate_mix_weights` finds the weights that maximise the likelihood of held-out
sentences (expectation-maximisation over the per-word component probabilities).
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

from wenet.lm.ngram import BOS, EOS, NgramLM, Ngram, NO_PROB

logger = logging.getLogger(__name__)

_FLOOR = 1e-12  # smallest probability mass a context may leave to its back-off


def _prob(lm: NgramLM, context: Ngram, word: str) -> float:
    """P(word | context) under one component; 0 for a word outside its vocabulary."""
    if word not in lm.vocab:
        return 0.0
    return 10.0 ** lm.log10_prob(context, word)


def _check_weights(lms: Sequence[NgramLM], weights: Sequence[float]) -> List[float]:
    if not lms or len(lms) != len(weights):
        raise ValueError(f"{len(lms)} models need as many weights, got {len(weights)}")
    if any(w < 0 for w in weights) or not math.isclose(sum(weights), 1.0, abs_tol=1e-6):
        raise ValueError(f"mixture weights must be non-negative and sum to 1, got {list(weights)}")
    return [float(w) for w in weights]


def mix_ngram_lms(lms: Sequence[NgramLM], weights: Sequence[float]) -> NgramLM:
    """One back-off model of the mixture ``sum_i weights[i] * lms[i]`` (module docstring)."""
    weights = _check_weights(lms, weights)
    parts = [(lm, w) for lm, w in zip(lms, weights) if w > 0]  # a 0-weight model adds nothing
    order = max(lm.order for lm, _ in parts)
    probs: List[Dict[Ngram, float]] = [dict() for _ in range(order)]
    for n in range(1, order + 1):
        grams = set()
        for lm, _ in parts:
            if n <= lm.order:
                grams.update(lm.probs[n - 1])
        table = probs[n - 1]
        for gram in sorted(grams):  # sorted: sums below in a fixed order, same bits each run
            if gram[-1] == BOS:  # <s> is never predicted; it stays as a context only
                table[gram] = NO_PROB
                continue
            p = sum(w * _prob(lm, gram[:-1], gram[-1]) for lm, w in parts)
            table[gram] = math.log10(p) if p > 0 else NO_PROB
    merged = NgramLM(order, probs, {})
    seen: Dict[Ngram, List[str]] = defaultdict(list)
    for table in probs[1:]:
        for gram in table:
            seen[gram[:-1]].append(gram[-1])
    floored = 0
    for ctx in sorted(seen, key=len):  # shorter contexts first: longer ones query them
        words = seen[ctx]
        num = 1.0 - sum(10.0 ** probs[len(ctx)][ctx + (w,)] for w in words)
        den = 1.0 - sum(10.0 ** merged.log10_prob(ctx[1:], w) for w in words)
        if num < _FLOOR or den < _FLOOR:
            floored += 1
            num, den = max(num, _FLOOR), max(den, _FLOOR)
        merged.backoffs[ctx] = math.log10(num / den)
    if floored:
        logger.warning("%d contexts left (almost) no mass to back off to; floored at %g",
                       floored, _FLOOR)
    logger.info("mixed %d models (weights %s): %s n-grams", len(lms),
                ", ".join(f"{w:.3f}" for w in weights), "/".join(str(len(t)) for t in probs))
    return NgramLM(order, probs, merged.backoffs)


def _word_probs(lms: Sequence[NgramLM], sentences: Sequence[Sequence[str]]
                ) -> Tuple[List[List[float]], int]:
    """Each component's probability of every word (``</s>`` included) of the sentences
    that some component knows, and the number of words no component knows."""
    rows: List[List[float]] = []
    unknown = 0
    for words in sentences:
        context: List[str] = [BOS]
        for w in list(words) + [EOS]:
            row = [_prob(lm, tuple(context), w) for lm in lms]
            if any(p > 0 for p in row):
                rows.append(row)
            else:
                unknown += 1
            context.append(w)
    return rows, unknown


def estimate_mix_weights(lms: Sequence[NgramLM], sentences: Sequence[Sequence[str]],
                         iterations: int = 200, tolerance: float = 1e-6
                         ) -> Tuple[List[float], float]:
    """The mixture weights maximising the likelihood of ``sentences`` (EM, from equal
    weights), and the mixture's perplexity on them (over the words some component knows)."""
    rows, unknown = _word_probs(lms, sentences)
    if not rows:
        raise ValueError("no held-out words that any model knows: cannot estimate weights")
    if unknown:
        logger.info("%d held-out words are in no model's vocabulary; left out", unknown)
    k = len(lms)
    weights = [1.0 / k] * k
    for _ in range(iterations):
        acc = [0.0] * k
        for row in rows:
            total = sum(w * p for w, p in zip(weights, row))
            for i in range(k):
                acc[i] += weights[i] * row[i] / total
        new = [a / len(rows) for a in acc]
        done = max(abs(a - b) for a, b in zip(new, weights)) < tolerance
        weights = new
        if done:
            break
    log_sum = sum(math.log(sum(w * p for w, p in zip(weights, row))) for row in rows)
    return weights, math.exp(-log_sum / len(rows))
