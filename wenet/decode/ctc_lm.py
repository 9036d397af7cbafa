"""CTC prefix beam search with a word n-gram language model (shallow fusion).

The model's units are sentencepiece word pieces: a piece that starts with ``▁``
begins a word, any other piece continues the current one.  Each prefix therefore
has a sequence of finished words and one unfinished word, and its score is

    CTC log score + lm_weight * ln P_LM(finished words) + word_bonus * (number finished)

A word is scored by the LM when it is finished, i.e. when the next word begins;
at the end of the utterance the unfinished word is finished and ``</s>`` scored
(:meth:`LMFusion.finish`).  All LM terms are a function of the prefix alone, so
prefixes merge exactly as in the plain search, and with no pruning the n-best
scores equal a brute-force sum over alignments plus these terms (the tests check
exactly that).

With ``restrict_vocab`` (the default) a prefix survives only while its unfinished
word is a prefix of some word of the LM's vocabulary and each finished word is in
it: the search spells words, not arbitrary piece strings.  The vocabulary is the
LM's unigram list, so the text the LM was trained on decides which words can be
recognised.  Without it, unknown words are scored as the LM's ``<unk>``.

The search runs one utterance at a time in Python; per frame only the
``beam_size`` most likely units (blank included) extend, repeat or end a prefix, as in
the tensor search of ctc.py, so with the LM weighted 0 and an open vocabulary both
give the same n-best.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple

from wenet.dataset.tokenizer import SPACE
from wenet.decode.hyps import NEG_INF, Hyp, NBest
from wenet.lm.ngram import EOS, Ngram, NgramLM

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

WORD_START = SPACE  # sentencepiece's word-boundary mark


def _logadd(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


class _LMInfo:
    """What the LM knows about a prefix: the collected LM score (weight and bonus
    applied), the LM state after its finished words, and its unfinished word."""

    __slots__ = ("score", "state", "partial")

    def __init__(self, score: float, state: Ngram, partial: str) -> None:
        self.score, self.state, self.partial = score, state, partial


@dataclass
class LMFusion:
    """A word n-gram model and the settings of its fusion with a CTC search.

    ``units``: the model's unit strings by id (units.txt order).  Units written
    ``<...>`` (blank, unk, sos/eos) never enter a prefix under ``restrict_vocab``.
    """

    lm: NgramLM
    units: Sequence[str]
    weight: float = 0.5
    word_bonus: float = 0.0
    restrict_vocab: bool = True
    _prefixes: FrozenSet[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not any(u.startswith(WORD_START) for u in self.units):
            raise ValueError("LM fusion needs word-piece units in which a piece starting "
                             f"with {WORD_START!r} begins a word (a sentencepiece model's); "
                             "these units have none")
        self._prefixes = frozenset(w[:i] for w in self.lm.vocab for i in range(len(w) + 1))

    @classmethod
    def from_arpa(cls, path: str, symbol_table: Dict[str, int], weight: float = 0.5,
                  word_bonus: float = 0.0, restrict_vocab: bool = True) -> "LMFusion":
        """The fusion of the ARPA model at ``path`` with the units of ``symbol_table``
        (units.txt read as ``{unit: id}``)."""
        units = [""] * (max(symbol_table.values()) + 1)
        for unit, i in symbol_table.items():
            units[i] = unit
        lm = NgramLM.read_arpa(path)
        logger.info("LM %s: order %d, %d words; weight %g, word bonus %g, %s vocabulary",
                    path, lm.order, len(lm.vocab), weight, word_bonus,
                    "its" if restrict_vocab else "open")
        return cls(lm, units, weight, word_bonus, restrict_vocab)

    def root(self) -> _LMInfo:
        """The empty prefix's state."""
        return _LMInfo(0.0, self.lm.start(), "")

    def _finish_word(self, info: _LMInfo) -> Optional[Tuple[float, Ngram]]:
        """(score, state) after the unfinished word of ``info`` is finished; ``None``
        if it is not a word the search may output."""
        word = info.partial
        if not word:
            return info.score, info.state
        if self.restrict_vocab and word not in self.lm.vocab:
            return None
        lp, state = self.lm.score(info.state, word)
        if lp == NEG_INF:
            return None
        return info.score + self.weight * lp + self.word_bonus, state

    def extend(self, info: _LMInfo, unit: int) -> Optional[_LMInfo]:
        """The state of a prefix extended by ``unit``; ``None`` if that is not allowed."""
        piece = self.units[unit]
        if piece.startswith("<") and piece.endswith(">") and len(piece) > 2:
            if self.restrict_vocab:
                return None
            piece = WORD_START + piece
        if piece.startswith(WORD_START):
            done = self._finish_word(info)
            if done is None:
                return None
            score, state = done
            partial = piece[len(WORD_START):]
        else:
            score, state = info.score, info.state
            partial = info.partial + piece
        if self.restrict_vocab and partial not in self._prefixes:
            return None
        return _LMInfo(score, state, partial)

    def finish(self, info: _LMInfo) -> float:
        """The LM score of a finished hypothesis (its last word and ``</s>`` scored);
        -inf if its last word is not allowed."""
        done = self._finish_word(info)
        if done is None:
            return NEG_INF
        score, state = done
        return score + self.weight * self.lm.score(state, EOS)[0]


def ctc_lm_prefix_beam_search(ctc_logprobs: "torch.Tensor", lengths: "torch.Tensor",
                              beam_size: int, fusion: LMFusion, blank_id: int = 0,
                              blank_skip_threshold: Optional[float] = 0.999) -> List[NBest]:
    """The n-best ``(prefix, CTC + LM score)`` of each utterance of ``[B, T, V]``
    log-probabilities, best first (module docstring); blank skipping as in ctc.py."""
    lp_all = ctc_logprobs.detach().double().cpu()
    k = min(beam_size, lp_all.size(-1))
    topk_lp, topk_ids = lp_all.topk(k, dim=-1)
    out: List[NBest] = []
    for b in range(lp_all.size(0)):
        T = int(lengths[b])
        state = CtcLmPrefixBeamState(beam_size, fusion, blank_id, blank_skip_threshold)
        state.feed(lp_all[b, :T].tolist(), topk_lp[b, :T].tolist(), topk_ids[b, :T].tolist())
        out.append(state.nbest())
    return out


def ctc_lm_search_utterance(lp: List[List[float]], topk_lp: List[List[float]],
                            topk_ids: List[List[int]], beam_size: int, fusion: LMFusion,
                            blank_id: int = 0, blank_skip_threshold: Optional[float] = 0.999
                            ) -> NBest:
    """The n-best of one utterance from plain lists: its frames' log-probabilities
    ``lp`` [T][V] and their top units ``topk_ids`` (``topk_lp``) [T][K], best first, as
    ``ctc_lm_prefix_beam_search`` computes them; no torch (``wenet.runtime`` uses it)."""
    state = CtcLmPrefixBeamState(beam_size, fusion, blank_id, blank_skip_threshold)
    state.feed(lp, topk_lp, topk_ids)
    return state.nbest()


class CtcLmPrefixBeamState:
    """The LM-fused prefix beam search of one utterance whose log-probabilities arrive in
    pieces (a stream): the beam and the prefixes' LM states are kept between calls, so
    ``nbest()`` after all frames equals ``ctc_lm_prefix_beam_search``'s n-best, which runs
    this same loop over the whole utterance."""

    def __init__(self, beam_size: int, fusion: LMFusion, blank_id: int = 0,
                 blank_skip_threshold: Optional[float] = 0.999) -> None:
        self.beam_size = beam_size
        self.fusion = fusion
        self.blank_id = blank_id
        self.skip_log = None if blank_skip_threshold is None else math.log(blank_skip_threshold)
        self.infos: Dict[Hyp, Optional[_LMInfo]] = {(): fusion.root()}
        self.beam: Dict[Hyp, List[float]] = {(): [0.0, NEG_INF]}  # prefix -> [pb, pnb]
        self.frames = 0

    def advance(self, logprobs: torch.Tensor) -> None:
        """Feed CTC log-probabilities (T, V) of the next frames."""
        lp = logprobs.detach().double().cpu()
        topk_lp, topk_ids = lp.topk(min(self.beam_size, lp.size(-1)), dim=-1)
        self.feed(lp.tolist(), topk_lp.tolist(), topk_ids.tolist())

    def _info(self, prefix: Hyp) -> Optional[_LMInfo]:
        if prefix not in self.infos:
            parent = self.infos[prefix[:-1]]
            self.infos[prefix] = None if parent is None else self.fusion.extend(parent,
                                                                                prefix[-1])
        return self.infos[prefix]

    def feed(self, lp: List[List[float]], topk_lp: List[List[float]],
             topk_ids: List[List[int]]) -> None:
        """The frame loop on frames given as lists: all log-probabilities and the top-k."""
        blank_id, beam = self.blank_id, self.beam
        for t, frame in enumerate(lp):
            lp_blank = frame[blank_id]
            if self.skip_log is not None and lp_blank > self.skip_log:
                beam = {p: [_logadd(pb, pnb) + lp_blank, NEG_INF]
                        for p, (pb, pnb) in beam.items()}
                continue
            nxt: Dict[Hyp, List[float]] = {}

            def add(prefix: Hyp, pb: float, pnb: float) -> None:
                cur = nxt.get(prefix)
                if cur is None:
                    nxt[prefix] = [pb, pnb]
                else:
                    cur[0], cur[1] = _logadd(cur[0], pb), _logadd(cur[1], pnb)

            for prefix, (pb, pnb) in beam.items():
                total = _logadd(pb, pnb)
                last = prefix[-1] if prefix else None
                for u, lu in zip(topk_ids[t], topk_lp[t]):
                    if u == blank_id:
                        add(prefix, total + lu, NEG_INF)
                        continue
                    if u == last:  # the last unit repeated: the prefix stays
                        add(prefix, NEG_INF, pnb + lu)
                    new = prefix + (u,)
                    if self._info(new) is None:
                        continue
                    add(new, NEG_INF, (pb if u == last else total) + lu)
            if not nxt:  # every top unit was refused: the frame counts as blank, the beam lives on
                nxt = {p: [_logadd(pb, pnb) + lp_blank, NEG_INF] for p, (pb, pnb) in beam.items()}
            ranked = sorted(nxt.items(),
                            key=lambda kv: -(_logadd(*kv[1]) + self.infos[kv[0]].score))
            beam = dict(ranked[:self.beam_size])
        self.beam = beam
        self.frames += len(lp)

    def nbest(self) -> NBest:
        """The prefixes as finished hypotheses (last word and ``</s>`` scored), best first;
        those whose last word the LM does not allow are left out."""
        nbest = []
        for prefix, (pb, pnb) in self.beam.items():
            score = _logadd(pb, pnb) + self.fusion.finish(self.infos[prefix])
            if score > NEG_INF:
                nbest.append((prefix, score))
        nbest.sort(key=lambda x: -x[1])
        return nbest

    def partial_nbest(self) -> NBest:
        """The prefixes as the search ranks them now (the unfinished word not yet scored),
        best first: what a stream shows before its end."""
        return sorted(((p, _logadd(pb, pnb) + self.infos[p].score)
                       for p, (pb, pnb) in self.beam.items()), key=lambda x: -x[1])

    def best(self) -> List[int]:
        ranked = self.partial_nbest()
        return list(ranked[0][0]) if ranked else []
