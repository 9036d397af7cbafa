"""Batched modified beam search against the former per-utterance search, exhaustive search
(with big blanks and hotword bonuses) and its own batch-1 runs."""
import math
from typing import Dict, List, Tuple

import pytest
import torch

from tests.decode.toys import tiny_transducer, transducer_score_tol
from wenet.decode.context_graph import ContextGraph
from wenet.decode.transducer import rnnt_beam_search


def _enc(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, 16, generator=g) * 2


def _reference_one(model, enc, beam):
    """The per-utterance modified beam search this project had before the batched one
    (standard blanks only), kept as the reference: one utterance [T, D] at a time."""
    blank = model.blank_symbol()
    enc_proj = model.project_encoder(enc)
    state = model.predictor_init_state(1)
    pred, state = model.forward_predictor_step(torch.tensor([blank]), state)
    seqs, scores = [()], torch.zeros(1, dtype=torch.float64)
    for t in range(enc_proj.size(0)):
        logits = model.forward_joint_step(enc_proj[t].expand(len(seqs), -1), pred)
        logp = torch.log_softmax(logits.float(), dim=-1).double()
        V = logp.size(1)
        top_s, top = (scores.unsqueeze(1) + logp).view(-1).topk(min(beam, logp.numel()))
        merged: Dict[Tuple[int, ...], int] = {}
        new_seqs, new_scores, src, tok = [], [], [], []
        for s, k in zip(top_s, top.tolist()):
            i, v = divmod(k, V)
            seq = seqs[i] if v == blank else seqs[i] + (v,)
            if seq in merged:
                new_scores[merged[seq]] = torch.logaddexp(new_scores[merged[seq]], s)
                continue
            merged[seq] = len(new_seqs)
            new_seqs.append(seq)
            new_scores.append(s)
            src.append(i)
            tok.append(v)
        rows = torch.tensor(src)
        pred, state = pred[rows], [s[rows] for s in state]
        for j, v in enumerate(tok):
            if v != blank:
                out, st = model.forward_predictor_step(torch.tensor([v]),
                                                       [s[j:j + 1] for s in state])
                pred[j] = out[0]
                for s, x in zip(state, st):
                    s[j] = x[0]
        seqs, scores = new_seqs, torch.stack(new_scores)
    order = sorted(range(len(seqs)), key=lambda i: -float(scores[i]))
    return [(seqs[i], float(scores[i])) for i in order]


@pytest.mark.parametrize("predictor,beam", [("stateless", 4), ("lstm", 3), ("stateless", 8)])
def test_batched_equals_per_utterance_search(predictor, beam):
    model = tiny_transducer(predictor, seed=beam)
    enc = _enc(5, 14, seed=beam)
    lens = torch.tensor([14, 9, 12, 3, 7])
    stats: Dict[str, int] = {}
    batched = rnnt_beam_search(model, enc, lens, beam_size=beam, stats=stats)
    labels = 0
    for b in range(5):
        want = _reference_one(model, enc[b, :lens[b]], beam)
        assert [s for s, _ in batched[b]] == [s for s, _ in want]
        assert [x for _, x in batched[b]] == pytest.approx(
            [x for _, x in want], abs=transducer_score_tol(want[-1][1], int(lens[b])))
        labels += len(want[0][0])
    assert labels > 5  # hypotheses with labels were compared
    assert stats["joint_calls"] == 14  # one joint call per frame for the whole batch


def _exhaustive(model, enc, bonus=None):
    """{tokens: log of the summed probability of all alignments} with at most one label per
    frame, big blanks landing on or before T; ``bonus(tokens)`` added per sequence."""
    blank, T = model.blank_symbol(), enc.size(0)
    durations = dict(zip(model.big_blank_ids(), model.big_blank_durations()))
    enc_proj = model.project_encoder(enc)
    cache = {}

    def logp_at(t, seq):
        if (t, seq) not in cache:
            state = model.predictor_init_state(1)
            out, state = model.forward_predictor_step(torch.tensor([blank]), state)
            for k in seq:
                out, state = model.forward_predictor_step(torch.tensor([k]), state)
            logits = model.forward_joint_step(enc_proj[t:t + 1], out)
            # float32 log-softmax, as the search computes it (then summed in float64)
            cache[t, seq] = torch.log_softmax(logits[0].float(), -1).double().tolist()
        return cache[t, seq]

    totals: Dict[Tuple[int, ...], List[float]] = {}

    def walk(t, seq, score):
        if t == T:
            totals.setdefault(seq, []).append(score)
            return
        for v, lp in enumerate(logp_at(t, seq)):
            if v == blank:
                walk(t + 1, seq, score + lp)
            elif v in durations:
                if t + durations[v] <= T:
                    walk(t + durations[v], seq, score + lp)
            else:
                walk(t + 1, seq + (v,), score + lp)

    walk(0, (), 0.0)
    return {seq: math.log(sum(math.exp(x) for x in v)) + (bonus(seq) if bonus else 0.0)
            for seq, v in totals.items()}


@pytest.mark.parametrize("durations,T", [((), 3), ((2,), 4), ((2, 3), 4)])
def test_wide_beam_equals_exhaustive_search(durations, T):
    # float64 model: rows evaluated in batches of different sizes round alike
    model = tiny_transducer(durations=durations, seed=3, big_bias=1.0).double()
    enc = _enc(2, T, seed=7).double()
    exact = _exhaustive(model, enc[0])
    nbest = rnnt_beam_search(model, enc[:1], torch.tensor([T]), beam_size=10 ** 4)[0]
    assert {s for s, _ in nbest} == set(exact)
    for seq, score in nbest:
        assert score == pytest.approx(exact[seq], abs=1e-6)
    assert nbest[0][1] == pytest.approx(max(exact.values()), abs=1e-6)
    # the same utterance inside a batch, beside a shorter one
    both = rnnt_beam_search(model, enc, torch.tensor([T, T - 1]), beam_size=10 ** 4)
    assert [s for s, _ in both[0]] == [s for s, _ in nbest]
    assert [x for _, x in both[0]] == pytest.approx([x for _, x in nbest], abs=1e-6)
    exact1 = _exhaustive(model, enc[1, :T - 1])
    for seq, score in both[1]:
        assert score == pytest.approx(exact1[seq], abs=1e-6)


def test_multiblank_beam_is_batch_independent_and_saves_joint_calls():
    model = tiny_transducer(durations=(2, 4), seed=1, big_bias=3.0)
    enc = _enc(4, 20, seed=2)
    lens = torch.tensor([20, 15, 9, 12])
    stats: Dict[str, int] = {}
    batched = rnnt_beam_search(model, enc, lens, beam_size=4, stats=stats)
    evals = 0
    for b in range(4):
        one_stats: Dict[str, int] = {}
        one = rnnt_beam_search(model, enc[b:b + 1, :lens[b]], lens[b:b + 1], beam_size=4,
                               stats=one_stats)[0]
        assert [s for s, _ in one] == [s for s, _ in batched[b]]
        assert [x for _, x in one] == pytest.approx([x for _, x in batched[b]],
                                                    abs=transducer_score_tol(one[-1][1], int(lens[b])))
        evals += one_stats["joint_evals"]
    assert stats["joint_evals"] == evals
    # the standard search evaluates every surviving hypothesis on every frame: with big
    # blanks taken, hypotheses skip frames, so fewer evaluations than beam x frames
    assert stats["joint_evals"] < 4 * int(lens.sum())


def test_hotword_bonus_equals_exhaustive_with_graph_score():
    # float64, as in the wide-beam test: in float32 a score near -11 carries about 1e-6 of
    # rounding, which depends on how many rows the joint network evaluated together
    model = tiny_transducer(seed=3).double()
    enc = _enc(1, 3, seed=3).double()
    graph = ContextGraph([[1, 2], [3]], context_score=1.5)
    exact = _exhaustive(model, enc[0], bonus=graph.score)
    nbest = rnnt_beam_search(model, enc, torch.tensor([3]), beam_size=10 ** 4,
                             context_graph=graph)[0]
    assert {s for s, _ in nbest} == set(exact)
    for seq, score in nbest:
        assert score == pytest.approx(exact[seq], abs=1e-6)
    assert nbest[0][1] == pytest.approx(max(exact.values()), abs=1e-6)
    assert any(graph.score(s) > 0 for s, _ in nbest)


def test_hotword_bonus_changes_the_winner_and_length_norm_ranks_per_token():
    model = tiny_transducer(seed=0)
    enc = _enc(3, 10, seed=4)
    lens = torch.tensor([10, 8, 6])
    plain = rnnt_beam_search(model, enc, lens, beam_size=6)
    target = plain[0][-1][0]  # the worst hypothesis of utterance 0
    assert target and plain[0][0][0] != target
    graph = ContextGraph([list(target)], context_score=20.0)
    biased = rnnt_beam_search(model, enc, lens, beam_size=6, context_graph=graph)
    def contains(seq, phrase):
        return any(seq[i:i + len(phrase)] == phrase for i in range(len(seq)))

    assert not contains(plain[0][0][0], target) and contains(biased[0][0][0], target)
    norm = rnnt_beam_search(model, enc, lens, beam_size=6, length_norm=True)
    for b in range(3):
        want = sorted(plain[b], key=lambda h: -h[1] / max(1, len(h[0])))
        assert norm[b] == want
