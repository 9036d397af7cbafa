"""Mixing n-gram models: stored n-grams score as the exact mixture, every context is a
distribution, a one-model mix is that model, EM finds the likelihood maximum, and
tools/train_ngram.py --mix_text writes the mixture it describes."""
import math

import pytest

from tests.common import load_tool
from wenet.lm.ngram import BOS, EOS, NgramLM, train_kneser_ney
from wenet.lm.ngram_mix import estimate_mix_weights, mix_ngram_lms

train_ngram = load_tool("train_ngram")

IN_DOMAIN = [s.split() for s in ["THE CAT SAT", "THE CAT", "A CAT SAT ON THE MAT",
                                 "THE MAT", "SAT ON A CAT", "ON THE MAT THE CAT SAT"]]
GENERAL = [s.split() for s in ["A DOG RAN", "THE DOG SAT ON A LOG", "A LOG", "THE SUN",
                               "THE DOG AND THE CAT RAN", "A SUN ON THE LOG", "RAN AND SAT"]]


def _mixture(lms, weights, ctx, w):
    return sum(lam * 10 ** lm.log10_prob(ctx, w) for lm, lam in zip(lms, weights)
               if w in lm.vocab)


@pytest.mark.parametrize("orders", [(3, 3), (2, 3), (1, 2)])
def test_stored_ngrams_score_as_the_mixture_and_contexts_are_distributions(orders):
    lms = [train_kneser_ney(IN_DOMAIN, orders[0]), train_kneser_ney(GENERAL, orders[1])]
    weights = [0.7, 0.3]
    mixed = mix_ngram_lms(lms, weights)
    assert mixed.order == max(orders)
    assert mixed.vocab == lms[0].vocab | lms[1].vocab
    for table in mixed.probs:
        for gram in table:
            if gram[-1] == BOS:
                continue
            assert 10 ** mixed.log10_prob(gram[:-1], gram[-1]) == pytest.approx(
                _mixture(lms, weights, gram[:-1], gram[-1]), rel=1e-12), gram
    contexts = {g[:-1] for table in mixed.probs for g in table}
    contexts |= {("CAT", "DOG"), ("LOG",), ("SUN", "RAN"), ("ZZZ",)}
    for ctx in contexts:
        total = sum(10 ** mixed.log10_prob(ctx, w) for w in mixed.vocab)
        assert total == pytest.approx(1.0, abs=1e-12), ctx


def test_a_mix_with_one_weight_is_that_model():
    lms = [train_kneser_ney(IN_DOMAIN, 3), train_kneser_ney(GENERAL, 3)]
    mixed = mix_ngram_lms(lms, [1.0, 0.0])
    assert mixed.vocab == lms[0].vocab
    assert [set(t) for t in mixed.probs] == [set(t) for t in lms[0].probs]
    for ctx in [(), (BOS,), ("THE",), ("THE", "CAT"), ("CAT", "MAT"), ("DOG", "THE")]:
        for w in lms[0].vocab:
            assert mixed.log10_prob(ctx, w) == pytest.approx(lms[0].log10_prob(ctx, w),
                                                            abs=1e-12)


def test_mixed_model_round_trips_through_arpa(tmp_path):
    mixed = mix_ngram_lms([train_kneser_ney(IN_DOMAIN, 3), train_kneser_ney(GENERAL, 2)],
                          [0.4, 0.6])
    path = str(tmp_path / "mix.arpa")
    mixed.write_arpa(path)
    back = NgramLM.read_arpa(path)
    assert back.probs == mixed.probs and back.backoffs == mixed.backoffs


@pytest.mark.parametrize("weights", [[0.5, 0.4], [1.2, -0.2], [1.0]])
def test_bad_weights_are_refused(weights):
    lms = [train_kneser_ney(IN_DOMAIN, 2), train_kneser_ney(GENERAL, 2)]
    with pytest.raises(ValueError, match="weights"):
        mix_ngram_lms(lms, weights)


def _log_likelihood(lms, lam, sentences):
    total = 0.0
    for words in sentences:
        ctx = [BOS]
        for w in words + [EOS]:
            p = _mixture(lms, [lam, 1 - lam], tuple(ctx), w)
            if p > 0:
                total += math.log(p)
            ctx.append(w)
    return total


def test_em_weights_maximise_the_held_out_likelihood():
    lms = [train_kneser_ney(IN_DOMAIN, 3), train_kneser_ney(GENERAL, 3)]
    held = [s.split() for s in ["THE CAT SAT ON THE LOG", "A DOG SAT", "THE MAT AND THE SUN",
                                "ON A CAT", "UNSEEN WORDS HERE"]]
    (lam, rest), ppl = estimate_mix_weights(lms, held)
    assert lam + rest == pytest.approx(1.0, abs=1e-12)
    grid = [i / 2000 for i in range(1, 2000)]
    best = max(grid, key=lambda g: _log_likelihood(lms, g, held))
    assert lam == pytest.approx(best, abs=1e-3)
    known = lms[0].vocab | lms[1].vocab  # words no model knows are left out
    n = sum(1 for words in held for w in words + [EOS] if w in known)
    assert ppl == pytest.approx(math.exp(-_log_likelihood(lms, lam, held) / n), rel=1e-6)


def _write(path, sentences):
    path.write_text("".join(" ".join(s) + "\n" for s in sentences))
    return str(path)


def test_train_ngram_mix_text_writes_the_described_mixture(tmp_path, capsys):
    primary = IN_DOMAIN * 2 + [["THE", "SUN", "SAT"], ["A", "MAT"]]
    ind, gen = _write(tmp_path / "in.txt", primary), _write(tmp_path / "gen.txt", GENERAL)

    def run(*extra):
        out = str(tmp_path / "lm.arpa")
        assert train_ngram.main(["--order", "3", "--text", ind, "--mix_text", gen,
                                 "--out", out, *extra]) == 0
        return NgramLM.read_arpa(out), capsys.readouterr().out

    lm, out = run("--mix_weight", "0.3")
    want = mix_ngram_lms([train_kneser_ney(primary, 3), train_kneser_ney(GENERAL, 3)], [0.3, 0.7])
    assert lm.probs == want.probs and lm.backoffs == want.backoffs
    assert "mix weight of the --text model: 0.300" in out

    lm, out = run("--heldout_every", "3")  # auto: EM on sentences 3, 6, 9, ...
    held, rest = primary[2::3], [s for i, s in enumerate(primary) if (i + 1) % 3]
    (lam, _), _ = estimate_mix_weights([train_kneser_ney(rest, 3), train_kneser_ney(GENERAL, 3)],
                                       held)
    want = mix_ngram_lms([train_kneser_ney(primary, 3), train_kneser_ney(GENERAL, 3)],
                         [lam, 1 - lam])
    assert lm.probs == want.probs and lm.backoffs == want.backoffs
    assert f"mix weight of the --text model: {lam:.3f}" in out


@pytest.mark.parametrize("extra,message", [(["--mix_weight", "1.5"], "a weight in [0, 1]"),
                                           (["--heldout_every", "1"], "at least 2")])
def test_train_ngram_refuses_bad_mix_options(tmp_path, capsys, extra, message):
    ind = _write(tmp_path / "in.txt", IN_DOMAIN)
    with pytest.raises(SystemExit) as e:
        train_ngram.main(["--text", ind, "--mix_text", ind, "--out", str(tmp_path / "x.arpa"),
                          *extra])
    assert e.value.code == 2 and message in capsys.readouterr().err
