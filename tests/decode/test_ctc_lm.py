"""CTC prefix beam search with a word n-gram LM, checked against brute force."""
import math

import pytest
import torch

from tests.decode.test_ctc import _exhaustive
from tests.decode.toys import rand_logprobs
from wenet.decode.ctc import ctc_prefix_beam_search
from wenet.decode.ctc_lm import WORD_START, LMFusion, ctc_lm_prefix_beam_search
from wenet.lm.ngram import BOS, EOS, train_kneser_ney

W = WORD_START
UNITS = ["<blank>", W + "A", "B", W + "AB", W + "B", "<unk>"]
LM = train_kneser_ney([s.split() for s in ["A AB", "AB B", "B A AB", "A"]], order=2)


def _words(prefix):
    """Words of a unit sequence, as the recogniser's text would split it."""
    text = "".join(UNITS[u] if not UNITS[u].startswith("<") else W + UNITS[u] for u in prefix)
    return [w for w in text.split(W) if w]


def _fused(prefix, weight, bonus, restrict):
    """The LM terms of a finished prefix, straight from the LM (None: not allowed)."""
    words = _words(prefix)
    if restrict and (any(w not in LM.vocab for w in words)
                     or any(UNITS[u].startswith("<") for u in prefix)):
        return None
    lp = sum(LM.log10_prob([BOS] + words[:i], w) for i, w in enumerate(words + [EOS]))
    return weight * lp * math.log(10) + bonus * len(words)


@pytest.mark.parametrize("T,seed,weight,bonus,restrict", [
    (4, 0, 0.5, 0.0, True), (5, 1, 1.0, 1.5, True), (5, 2, 0.3, -0.5, False),
    (3, 3, 2.0, 0.0, False), (5, 4, 0.8, 0.7, True)])
def test_equals_brute_force(T, seed, weight, bonus, restrict):
    lp = rand_logprobs(1, T, len(UNITS), seed)
    ref = {}
    for prefix, ctc in _exhaustive(lp[0]).items():
        lm = _fused(prefix, weight, bonus, restrict)
        if lm is not None:
            ref[prefix] = ctc + lm
    fusion = LMFusion(LM, UNITS, weight=weight, word_bonus=bonus, restrict_vocab=restrict)
    nbest = ctc_lm_prefix_beam_search(lp, torch.tensor([T]), beam_size=10 ** 5, fusion=fusion,
                                      blank_skip_threshold=None)[0]
    assert {p for p, _ in nbest} == set(ref)
    for p, s in nbest:
        assert s == pytest.approx(ref[p], abs=1e-9)
    assert [s for _, s in nbest] == sorted((s for _, s in nbest), reverse=True)


def test_restricted_search_only_spells_vocabulary_words():
    lp = rand_logprobs(3, 12, len(UNITS), 7, peaky=0.5)
    fusion = LMFusion(LM, UNITS, weight=0.5)
    for nbest in ctc_lm_prefix_beam_search(lp, torch.tensor([12, 9, 5]), 4, fusion):
        assert nbest
        for prefix, _ in nbest:
            assert all(w in LM.vocab for w in _words(prefix))


def test_weight_zero_open_vocabulary_is_the_plain_search():
    lp = rand_logprobs(2, 9, len(UNITS), 5)
    lens = torch.tensor([9, 6])
    fusion = LMFusion(LM, UNITS, weight=0.0, restrict_vocab=False)
    for beam in (200, 3):
        fused = ctc_lm_prefix_beam_search(lp, lens, beam, fusion)
        plain = ctc_prefix_beam_search(lp, lens, beam)
        for f, p in zip(fused, plain):
            assert [h for h, _ in f] == [h for h, _ in p]
            assert [s for _, s in f] == pytest.approx([s for _, s in p], abs=1e-4)


def test_the_lm_picks_the_likelier_word_sequence():
    # CTC is unsure between "B" and "A" on the first word; the LM has seen "A AB" only
    fusion = LMFusion(LM, UNITS, weight=1.0)
    probs = torch.full((1, 4, len(UNITS)), 1e-4)
    probs[0, 0, 4], probs[0, 0, 1] = 0.5, 0.45   # "▁B" slightly over "▁A"
    probs[0, 1, 0] = 0.9
    probs[0, 2, 3] = 0.9                         # "▁AB"
    probs[0, 3, 0] = 0.9
    lp = (probs / probs.sum(-1, keepdim=True)).log()
    plain = ctc_prefix_beam_search(lp, torch.tensor([4]), 5)[0][0][0]
    fused = ctc_lm_prefix_beam_search(lp, torch.tensor([4]), 5, fusion)[0][0][0]
    assert _words(plain) == ["B", "AB"] and _words(fused) == ["A", "AB"]


def test_units_without_word_marks_are_refused():
    with pytest.raises(ValueError, match="word-piece units"):
        LMFusion(LM, ["<blank>", "a", "b"])


def test_a_frame_whose_top_units_are_all_refused_keeps_the_beam():
    # beam 1: the middle frame's only expanded unit is <unk>, which the vocabulary refuses
    probs = torch.full((1, 3, len(UNITS)), 1e-3)
    probs[0, 0, 1] = 0.9                          # "▁A"
    probs[0, 1, 5], probs[0, 1, 0] = 0.6, 0.3     # <unk> over blank
    probs[0, 2, 0] = 0.9
    lp = (probs / probs.sum(-1, keepdim=True)).log()
    fusion = LMFusion(LM, UNITS, weight=0.5)
    [nbest] = ctc_lm_prefix_beam_search(lp, torch.tensor([3]), 1, fusion,
                                        blank_skip_threshold=None)
    assert [p for p, _ in nbest] == [(1,)]
    lp64 = lp.double()  # the search adds in float64
    ctc = lp64[0, 0, 1] + lp64[0, 1, 0] + lp64[0, 2, 0]
    assert nbest[0][1] == pytest.approx(float(ctc) + _fused((1,), 0.5, 0.0, True), abs=1e-9)
