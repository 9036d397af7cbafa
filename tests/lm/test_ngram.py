"""Word n-gram models: interpolated Kneser-Ney against a hand computation, proper
distributions, and the ARPA round trip."""
import math

import pytest

from wenet.lm.ngram import BOS, EOS, UNK, NgramLM, train_kneser_ney

SENTS = [s.split() for s in ["THE CAT SAT", "THE CAT", "A CAT SAT ON THE MAT", "THE MAT",
                             "SAT ON A CAT", "ON THE MAT THE CAT SAT"]]


def test_bigram_equals_hand_computation():
    # "A B" and "B": bigram counts (<s> A) 1, (A B) 1, (B </s>) 2, (<s> B) 1 -> D2 = 3/5.
    # Continuation counts A 1 ({<s>}), B 2 ({A, <s>}), </s> 1 -> D1 = 2/4, total 4, 3 types;
    # the uniform share 0.5 * 3 / 4 goes to 4 words (A, B, </s>, <unk>).
    lm = train_kneser_ney([["A", "B"], ["B"]], order=2)
    uni = {"A": 0.5 / 4 + 0.375 / 4, "B": 1.5 / 4 + 0.375 / 4, EOS: 0.5 / 4 + 0.375 / 4,
           UNK: 0.375 / 4}
    for w, p in uni.items():
        assert 10 ** lm.log10_prob([], w) == pytest.approx(p, rel=1e-12)
    assert 10 ** lm.log10_prob(["A"], "B") == pytest.approx(0.4 + 0.6 * uni["B"], rel=1e-12)
    assert 10 ** lm.log10_prob(["A"], "A") == pytest.approx(0.6 * uni["A"], rel=1e-12)
    assert 10 ** lm.log10_prob([BOS], "B") == pytest.approx(0.2 + 0.6 * uni["B"], rel=1e-12)
    # an unseen context backs off to the unigrams; an unknown word is <unk>
    assert 10 ** lm.log10_prob(["ZZZ"], "B") == pytest.approx(uni["B"], rel=1e-12)
    assert lm.log10_prob(["A"], "ZZZ") == lm.log10_prob(["A"], UNK)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_is_a_distribution(order):
    lm = train_kneser_ney(SENTS, order=order)
    contexts = {g[:-1] for table in lm.probs for g in table} | {("MAT", "ON"), ("DOG",)}
    for ctx in contexts:
        total = sum(10 ** lm.log10_prob(ctx, w) for w in lm.vocab)
        assert total == pytest.approx(1.0, abs=1e-12), ctx


def test_sentence_probability_is_the_chain_of_word_probabilities():
    lm = train_kneser_ney(SENTS, order=3)
    words = "THE CAT SAT ON THE MAT".split()
    chain = (lm.log10_prob([BOS], "THE") + lm.log10_prob([BOS, "THE"], "CAT")
             + lm.log10_prob(["THE", "CAT"], "SAT") + lm.log10_prob(["CAT", "SAT"], "ON")
             + lm.log10_prob(["SAT", "ON"], "THE") + lm.log10_prob(["ON", "THE"], "MAT")
             + lm.log10_prob(["THE", "MAT"], EOS))
    assert lm.sentence_log10_prob(words) == pytest.approx(chain, abs=1e-12)
    # the stateful scorer gives the same numbers in natural log
    state, total = lm.start(), 0.0
    for w in words + [EOS]:
        lp, state = lm.score(state, w)
        total += lp
    assert total == pytest.approx(chain * math.log(10), abs=1e-9)


def test_arpa_round_trip_is_exact(tmp_path):
    lm = train_kneser_ney(SENTS, order=3)
    path = str(tmp_path / "lm.arpa")
    lm.write_arpa(path)
    back = NgramLM.read_arpa(path)
    assert back.order == 3 and back.probs == lm.probs and back.backoffs == lm.backoffs
    for ctx in [(), (BOS,), ("THE",), ("THE", "CAT"), ("DOG", "THE"), ("MAT", "MAT")]:
        for w in sorted(lm.vocab):
            assert back.log10_prob(ctx, w) == lm.log10_prob(ctx, w)
    text = open(path).read()
    assert text.startswith("\\data\\\nngram 1=") and text.rstrip().endswith("\\end\\")


@pytest.mark.parametrize("bad,message", [
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-0.5\tA\n\\end\\\n", "declares 2 1-grams, found 1"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\nx\tA\n\\end\\\n", ":5: expected a number"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\n-0.5\tA\n", "no \\end\\"),
    ("\\data\\\nngram 1=1\n\n\\2-grams:\n-0.5\tA B\n\\end\\\n", ":4: section 2-grams out of order"),
])
def test_malformed_arpa_names_the_fault(tmp_path, bad, message):
    path = tmp_path / "bad.arpa"
    path.write_text(bad)
    with pytest.raises(ValueError, match=None) as e:
        NgramLM.read_arpa(str(path))
    assert message in str(e.value)
