"""Word n-gram language models: interpolated Kneser-Ney training and the ARPA format.

:func:`train_kneser_ney` estimates an interpolated Kneser-Ney model (one discount
per order, ``D = n1 / (n1 + 2 n2)`` from the count-of-counts) from tokenised
sentences.  The highest order uses raw counts; each lower order uses continuation
counts (the number of distinct words seen before the n-gram), except n-grams that
start with ``<s>``, which cannot be extended to the left and keep their raw counts.
For a context ``h`` seen in training,

    P(w | h) = max(a(h w) - D, 0) / a(h) + gamma(h) * P(w | h')
    gamma(h) = D * |{w : a(h w) > 0}| / a(h)

with ``h'`` the context without its oldest word; the unigram level interpolates
with the uniform distribution over the vocabulary (``</s>`` and ``<unk>`` included).
Each seen n-gram is stored with its interpolated probability and each context with
``gamma`` as its back-off weight, which is exactly the ARPA back-off form: a query
for an unseen n-gram backs off to the shorter context and multiplies by the weight.
So the model written to ARPA and read back (:meth:`NgramLM.read_arpa`) scores
every word in every context as the trained one did, and KenLM or SRILM tools read
the same file.

Scores are natural-log probabilities (ARPA files hold log10).
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import Dict, Iterable, List, Sequence, Tuple

from wenet.utils.file_utils import atomic_open, text_lines

logger = logging.getLogger(__name__)

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
LN10 = math.log(10.0)
NO_PROB = -99.0  # ARPA's log10 "probability" of <s>, which is never predicted

Ngram = Tuple[str, ...]


class NgramLM:
    """A back-off n-gram model: ``probs[n][ngram]`` (log10) and ``backoffs[ngram]`` (log10)."""

    def __init__(self, order: int, probs: List[Dict[Ngram, float]],
                 backoffs: Dict[Ngram, float]) -> None:
        if order < 1 or len(probs) != order:
            raise ValueError(f"an order-{order} model needs {order} n-gram tables, "
                             f"got {len(probs)}")
        self.order = order
        self.probs = probs
        self.backoffs = backoffs
        self.vocab = frozenset(g[0] for g in probs[0] if g[0] != BOS)
        self._cache: Dict[Tuple[Ngram, str], Tuple[float, Ngram]] = {}

    # ---- queries ----------------------------------------------------------------
    def log10_prob(self, context: Sequence[str], word: str) -> float:
        """log10 P(word | context), backing off as the ARPA format defines;
        a word outside the vocabulary is scored as ``<unk>`` (-inf without one)."""
        if word not in self.vocab:
            word = UNK
            if (UNK,) not in self.probs[0]:
                return -math.inf
        context = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        weight = 0.0
        while True:
            p = self.probs[len(context)].get(context + (word,))
            if p is not None:
                return weight + p
            weight += self.backoffs.get(context, 0.0)
            context = context[1:]

    def start(self) -> Ngram:
        """The state of a sentence's beginning."""
        return self._state((BOS,))

    def score(self, state: Ngram, word: str) -> Tuple[float, Ngram]:
        """(ln P(word | state), the state after ``word``); ``state`` comes from
        :meth:`start` or an earlier call.  Memoised."""
        key = (state, word)
        hit = self._cache.get(key)
        if hit is None:
            lp = self.log10_prob(state, word) * LN10
            hit = (lp, self._state(state + (word if word in self.vocab else UNK,)))
            self._cache[key] = hit
        return hit

    def _state(self, history: Ngram) -> Ngram:
        """The longest suffix of ``history`` (at most order-1 words) that is a context
        of some stored n-gram: histories with the same such suffix score alike."""
        history = history[len(history) - (self.order - 1):] if self.order > 1 else ()
        while history and history not in self.backoffs:
            history = history[1:]
        return history

    def sentence_log10_prob(self, words: Sequence[str]) -> float:
        """log10 P of a whole sentence, ``</s>`` included."""
        context: List[str] = [BOS]
        total = 0.0
        for w in list(words) + [EOS]:
            total += self.log10_prob(context, w)
            context.append(w)
        return total

    # ---- ARPA --------------------------------------------------------------------
    def write_arpa(self, path: str) -> None:
        """Write the model as an ARPA file (atomically); values keep full precision,
        so reading it back gives the same scores bit for bit."""
        with atomic_open(path) as f:
            f.write("\\data\\\n")
            for n in range(1, self.order + 1):
                f.write(f"ngram {n}={len(self.probs[n - 1])}\n")
            for n in range(1, self.order + 1):
                f.write(f"\n\\{n}-grams:\n")
                for gram in sorted(self.probs[n - 1]):
                    line = f"{self.probs[n - 1][gram]!r}\t{' '.join(gram)}"
                    if gram in self.backoffs:
                        line += f"\t{self.backoffs[gram]!r}"
                    f.write(line + "\n")
            f.write("\n\\end\\\n")

    @classmethod
    def read_arpa(cls, path: str) -> "NgramLM":
        """Read an ARPA file; a malformed line is a ``ValueError`` naming file and line."""
        declared: Dict[int, int] = {}
        probs: List[Dict[Ngram, float]] = []
        backoffs: Dict[Ngram, float] = {}
        section = None  # "data", an order n, or "end"
        for lineno, line in text_lines(path):
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{lineno}"
            if line == "\\data\\":
                section = "data"
            elif line == "\\end\\":
                section = "end"
                break
            elif line.startswith("\\") and line.endswith("-grams:"):
                n = _int_or_raise(line[1:-len("-grams:")], where)
                if n != len(probs) + 1:
                    raise ValueError(f"{where}: section {n}-grams out of order")
                probs.append({})
                section = n
            elif section == "data":
                if not line.startswith("ngram ") or "=" not in line:
                    raise ValueError(f"{where}: expected 'ngram N=COUNT', got {line!r}")
                n, count = line[len("ngram "):].split("=", 1)
                declared[_int_or_raise(n, where)] = _int_or_raise(count, where)
            elif isinstance(section, int):
                parts = line.split()
                if len(parts) not in (section + 1, section + 2):
                    raise ValueError(f"{where}: a {section}-gram line needs a log10 "
                                     f"probability, {section} words and an optional "
                                     f"back-off weight, got {line!r}")
                gram = tuple(parts[1:section + 1])
                probs[-1][gram] = _float_or_raise(parts[0], where)
                if len(parts) == section + 2:
                    backoffs[gram] = _float_or_raise(parts[-1], where)
            else:
                raise ValueError(f"{where}: unexpected line outside the ARPA sections: {line!r}")
        if section != "end":
            raise ValueError(f"{path}: no \\end\\ marker (truncated ARPA file?)")
        if not probs:
            raise ValueError(f"{path}: no n-gram sections")
        for n, count in declared.items():
            if n > len(probs) or len(probs[n - 1]) != count:
                found = len(probs[n - 1]) if n <= len(probs) else 0
                raise ValueError(f"{path}: header declares {count} {n}-grams, found {found}")
        return cls(len(probs), probs, backoffs)


def _int_or_raise(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{where}: expected an integer, got {text!r}") from None


def _float_or_raise(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where}: expected a number, got {text!r}") from None


def _count(sentences: Iterable[Sequence[str]], order: int) -> List[Dict[Ngram, int]]:
    """Raw counts of every n-gram (n = 1..order) of the sentences padded with <s>, </s>."""
    counts: List[Dict[Ngram, int]] = [defaultdict(int) for _ in range(order)]
    for words in sentences:
        padded = (BOS,) + tuple(words) + (EOS,)
        for n in range(1, order + 1):
            table = counts[n - 1]
            for i in range(len(padded) - n + 1):
                gram = padded[i:i + n]
                if gram != (BOS,):
                    table[gram] += 1
    return counts


def _adjusted_counts(counts: List[Dict[Ngram, int]]) -> List[Dict[Ngram, int]]:
    """Kneser-Ney counts: raw at the highest order and for n-grams starting with <s>,
    the number of distinct left neighbours otherwise."""
    order = len(counts)
    adjusted: List[Dict[Ngram, int]] = [dict() for _ in range(order)]
    adjusted[-1] = dict(counts[-1])
    for n in range(order - 1, 0, -1):
        left: Dict[Ngram, int] = defaultdict(int)
        for gram in counts[n]:  # (n+1)-grams
            left[gram[1:]] += 1
        table = adjusted[n - 1]
        for gram, c in counts[n - 1].items():
            table[gram] = c if gram[0] == BOS else left[gram]
    return adjusted


def _discount(table: Dict[Ngram, int], n: int) -> float:
    n1 = sum(1 for c in table.values() if c == 1)
    n2 = sum(1 for c in table.values() if c == 2)
    if n1 == 0 or n2 == 0:
        logger.warning("order %d: %d singletons and %d doubletons, discount 0.5 assumed",
                       n, n1, n2)
        return 0.5
    return n1 / (n1 + 2.0 * n2)


def train_kneser_ney(sentences: Iterable[Sequence[str]], order: int = 3) -> NgramLM:
    """An interpolated Kneser-Ney model of ``order`` from word sequences (module docstring)."""
    if order < 1:
        raise ValueError(f"order must be at least 1, got {order}")
    counts = _count(sentences, order)
    if not counts[0]:
        raise ValueError("no sentences to train a language model on")
    adjusted = _adjusted_counts(counts)
    discounts = [_discount(adjusted[n], n + 1) for n in range(order)]
    vocab = sorted({g[0] for g in adjusted[0]} | {UNK})  # </s> included, <s> not
    lin_probs: List[Dict[Ngram, float]] = [dict() for _ in range(order)]
    gammas: Dict[Ngram, float] = {}
    for n in range(1, order + 1):
        table, d = adjusted[n - 1], discounts[n - 1]
        totals: Dict[Ngram, int] = defaultdict(int)
        types: Dict[Ngram, int] = defaultdict(int)
        for gram, c in table.items():
            totals[gram[:-1]] += c
            types[gram[:-1]] += 1
        for ctx in totals:
            gammas[ctx] = d * types[ctx] / totals[ctx]
        probs = lin_probs[n - 1]
        if n == 1:
            uniform = gammas[()] / len(vocab)
            for w in vocab:
                probs[(w,)] = max(table.get((w,), 0) - d, 0.0) / totals[()] + uniform
            continue
        for gram, c in table.items():
            ctx = gram[:-1]
            probs[gram] = (max(c - d, 0.0) / totals[ctx]
                           + gammas[ctx] * _interpolated(lin_probs, gammas, gram[1:]))
    log_probs = [{g: math.log10(p) for g, p in table.items()} for table in lin_probs]
    log_probs[0][(BOS,)] = NO_PROB
    backoffs = {ctx: math.log10(g) for ctx, g in gammas.items()
                if ctx and len(ctx) < order and g > 0}
    for ctx in backoffs:  # a context must be an n-gram of its own order
        log_probs[len(ctx) - 1].setdefault(ctx, NO_PROB)
    logger.info("trained a %d-gram Kneser-Ney model: %s n-grams, discounts %s", order,
                "/".join(str(len(t)) for t in log_probs),
                ", ".join(f"{d:.3f}" for d in discounts))
    return NgramLM(order, log_probs, backoffs)


def _interpolated(lin_probs: List[Dict[Ngram, float]], gammas: Dict[Ngram, float],
                  gram: Ngram) -> float:
    """P(gram[-1] | gram[:-1]) of the model trained so far (orders up to len(gram))."""
    weight = 1.0
    while True:
        p = lin_probs[len(gram) - 1].get(gram)
        if p is not None:
            return weight * p
        weight *= gammas.get(gram[:-1], 1.0)
        gram = gram[1:]
