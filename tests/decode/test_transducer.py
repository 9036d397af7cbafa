"""Transducer searches against plain reference loops and brute force."""
import itertools
import math

import pytest
import torch

from tests.decode.toys import tiny_transducer, transducer_score_tol
from wenet.decode.transducer import rnnt_beam_search, rnnt_greedy_search


def _enc(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, 16, generator=g) * 2


def _reference_greedy(model, enc, max_sym):
    """One utterance, one step at a time, written plainly."""
    blank = model.blank_symbol()
    durations = dict(zip(model.big_blank_ids(), model.big_blank_durations()))
    state = model.predictor_init_state(1)
    pred, state = model.forward_predictor_step(torch.tensor([blank]), state)
    hyp, score, evals, t = [], 0.0, 0, 0
    while t < enc.size(0):
        emitted = 0
        while True:
            logits = model.forward_joint_step(model.project_encoder(enc[t:t + 1]), pred)
            logp = torch.log_softmax(logits[0], dim=-1)
            evals += 1
            k = int(logp.argmax())
            score += float(logp[k])
            if k == blank:
                t += 1
                break
            if k in durations:
                t += durations[k]
                break
            hyp.append(k)
            pred, state = model.forward_predictor_step(torch.tensor([k]), state)
            emitted += 1
            if emitted == max_sym:
                t += 1
                break
    return hyp, score, evals


@pytest.mark.parametrize("predictor,max_sym", [("stateless", 1), ("stateless", 3), ("lstm", 2)])
def test_greedy_equals_reference_loop_and_batch_one(predictor, max_sym):
    model = tiny_transducer(predictor)
    enc = _enc(4, 12, seed=1)
    lens = torch.tensor([12, 7, 10, 3])
    batch = rnnt_greedy_search(model, enc, lens, max_sym)
    evals = 0
    for b in range(4):
        hyp, score, n = _reference_greedy(model, enc[b, :lens[b]], max_sym)
        assert batch.hyps[b] == hyp
        assert batch.scores[b] == pytest.approx(score, abs=1e-4)
        one = rnnt_greedy_search(model, enc[b:b + 1, :lens[b]], lens[b:b + 1], max_sym)
        assert one.hyps[0] == hyp
        evals += n
    assert batch.joint_evals == evals
    assert sum(len(h) for h in batch.hyps) > 4  # the test exercises label emission
    if max_sym > 1:  # a label not at the cap is followed by another joint call on its frame
        assert batch.joint_evals > int(lens.sum())


def test_multiblank_greedy_skips_frames():
    model = tiny_transducer(durations=(2, 4), big_bias=3.0)
    enc = _enc(3, 20, seed=2)
    lens = torch.tensor([20, 15, 9])
    res = rnnt_greedy_search(model, enc, lens, max_sym_per_frame=2)
    evals = 0
    for b in range(3):
        hyp, score, n = _reference_greedy(model, enc[b, :lens[b]], 2)
        assert res.hyps[b] == hyp
        assert res.scores[b] == pytest.approx(score, abs=1e-4)
        evals += n
    assert res.joint_evals == evals
    # a standard greedy search evaluates the joint at least once on every frame
    assert res.joint_evals < int(lens.sum())


def _exact_scores(model, enc):
    """log P(seq) summed over all alignments with at most one label per frame (brute force)."""
    blank, T = model.blank_symbol(), enc.size(0)
    V = model.forward_joint_step(model.project_encoder(enc[:1]),
                                 model.forward_predictor_step(
                                     torch.tensor([blank]), model.predictor_init_state(1))[0]
                                 ).size(-1)
    cache = {}

    def pred_of(seq):
        if seq not in cache:
            state = model.predictor_init_state(1)
            out, state = model.forward_predictor_step(torch.tensor([blank]), state)
            for k in seq:
                out, state = model.forward_predictor_step(torch.tensor([k]), state)
            cache[seq] = out
        return cache[seq]

    totals = {}
    for choice in itertools.product(range(V), repeat=T):
        seq, s = (), 0.0
        for t, k in enumerate(choice):
            logits = model.forward_joint_step(model.project_encoder(enc[t:t + 1]), pred_of(seq))
            s += float(torch.log_softmax(logits[0].double(), -1)[k])
            if k != blank:
                seq = seq + (k,)
        totals.setdefault(seq, []).append(s)
    return {seq: math.log(sum(math.exp(x) for x in v)) for seq, v in totals.items()}


def test_beam_search_without_pruning_is_exact():
    """With a beam wider than all hypotheses, merged scores are exact sums over alignments."""
    model = tiny_transducer(seed=3)
    enc = _enc(1, 3, seed=3)
    exact = _exact_scores(model, enc[0])
    nbest = rnnt_beam_search(model, enc, torch.tensor([3]), beam_size=10 ** 4)[0]
    assert len(nbest) == len(exact)
    for seq, score in nbest:
        assert score == pytest.approx(exact[seq], abs=transducer_score_tol(exact[seq], 3))
    assert nbest[0][1] == pytest.approx(max(exact.values()), abs=transducer_score_tol(nbest[0][1], 3))


@pytest.mark.parametrize("seed", range(4))
def test_beam_at_least_greedy_and_batch_independent(seed):
    model = tiny_transducer("lstm" if seed % 2 else "stateless", seed=seed)
    enc = _enc(4, 10, seed=10 + seed)
    lens = torch.tensor([10, 6, 9, 4])
    greedy = rnnt_greedy_search(model, enc, lens, max_sym_per_frame=1)
    beams = rnnt_beam_search(model, enc, lens, beam_size=4)
    for b in range(4):
        tol = transducer_score_tol(greedy.scores[b], int(lens[b]))
        assert beams[b][0][1] >= greedy.scores[b] - tol
        one = rnnt_beam_search(model, enc[b:b + 1, :lens[b]], lens[b:b + 1], beam_size=4)[0]
        assert [s for s, _ in one] == [s for s, _ in beams[b]]
        assert [x for _, x in one] == pytest.approx([x for _, x in beams[b]], abs=tol)
