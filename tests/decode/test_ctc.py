"""CTC searches checked against brute force and independent references."""
import itertools
import math
from collections import defaultdict

import pytest
import torch

from tests.decode.toys import rand_logprobs
from wenet.decode.ctc import ctc_greedy_search, ctc_prefix_beam_search


def _collapse(path, blank=0):
    out, prev = [], None
    for p in path:
        if p != blank and p != prev:
            out.append(p)
        prev = p
    return tuple(out)


def _exhaustive(lp):
    """{label sequence: log sum over all alignments} for one utterance (float64)."""
    T, V = lp.shape
    lp = lp.double()
    acc = defaultdict(list)
    for path in itertools.product(range(V), repeat=T):
        s = float(sum(lp[t, v] for t, v in enumerate(path)))
        if s > -math.inf:
            acc[_collapse(path)].append(s)
    return {k: float(torch.logsumexp(torch.tensor(v, dtype=torch.float64), 0))
            for k, v in acc.items()}


@pytest.mark.parametrize("T,V,seed", [(1, 3, 0), (3, 2, 1), (4, 3, 2), (5, 4, 3), (6, 4, 4),
                                      (6, 3, 5)])
def test_prefix_beam_equals_exhaustive(T, V, seed):
    lp = rand_logprobs(1, T, V, seed)
    ref = _exhaustive(lp[0])
    nbest = ctc_prefix_beam_search(lp, torch.tensor([T]), beam_size=1100,
                                   blank_skip_threshold=None)[0]
    got = dict(nbest)
    assert len(got) == len(nbest)  # no duplicate prefixes
    assert set(got) == set(ref)
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, abs=1e-5)
    scores = [s for _, s in nbest]
    assert scores == sorted(scores, reverse=True)


def test_prefix_beam_batch_with_padding_equals_exhaustive():
    lens = [6, 2, 5, 1, 4]
    lp = rand_logprobs(len(lens), 6, 4, 11)
    out = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=1100,
                                 blank_skip_threshold=None)
    for b, n in enumerate(lens):
        ref = _exhaustive(lp[b, :n])
        got = dict(out[b])
        assert set(got) == set(ref)
        assert all(got[k] == pytest.approx(v, abs=1e-5) for k, v in ref.items())


def test_blank_skip_treats_frame_as_blank():
    # Frame 2 is blank-dominated; around it token 1 repeats, which must stay two 1s.
    p = torch.tensor([[0.1, 0.8, 0.1], [0.3, 0.6, 0.1], [0.9995, 0.0003, 0.0002],
                      [0.2, 0.7, 0.1], [0.5, 0.2, 0.3]])
    lp = p.log().unsqueeze(0)
    got = dict(ctc_prefix_beam_search(lp, torch.tensor([5]), beam_size=200,
                                      blank_skip_threshold=0.999)[0])
    ref_lp = lp[0].clone()
    ref_lp[2, 1:] = -math.inf  # the skipped frame keeps only its blank
    ref = _exhaustive(ref_lp)
    assert set(got) == set(ref)
    assert all(got[k] == pytest.approx(v, abs=1e-5) for k, v in ref.items())
    assert (1, 1) in got and max(got, key=got.get) == (1, 1)


def _reference_pruned(lp, beam):
    """Straightforward dict-based prefix beam search with the same pruning rule."""
    hyps = [((), (0.0, -math.inf))]
    la = lambda a, b: float(torch.logaddexp(torch.tensor(a), torch.tensor(b)))  # noqa: E731
    for t in range(lp.size(0)):
        nxt = defaultdict(lambda: [-math.inf, -math.inf])
        vals, ids = lp[t].topk(min(beam, lp.size(1)))
        for v, u in zip(vals.tolist(), ids.tolist()):
            for pre, (b, nb) in hyps:
                tot = la(b, nb)
                if u == 0:
                    nxt[pre][0] = la(nxt[pre][0], tot + v)
                elif pre and pre[-1] == u:
                    nxt[pre][1] = la(nxt[pre][1], nb + v)
                    nxt[pre + (u,)][1] = la(nxt[pre + (u,)][1], b + v)
                else:
                    nxt[pre + (u,)][1] = la(nxt[pre + (u,)][1], tot + v)
        hyps = sorted(((k, tuple(v)) for k, v in nxt.items()), key=lambda x: -la(*x[1]))[:beam]
    return [(k, la(*v)) for k, v in hyps]


def test_prefix_beam_pruned_matches_reference():
    lens = [12, 7, 10]
    lp = rand_logprobs(3, 12, 6, 21, peaky=2.0)
    out = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=3, blank_skip_threshold=None)
    for b, n in enumerate(lens):
        ref = _reference_pruned(lp[b, :n], 3)
        assert [h for h, _ in out[b]] == [h for h, _ in ref]
        assert [s for _, s in out[b]] == pytest.approx([s for _, s in ref], abs=1e-5)


def test_greedy_equals_argmax_then_collapse():
    lens = [9, 3, 0, 7]
    lp = rand_logprobs(4, 9, 5, 3, peaky=3.0)
    lp[:, :, 0] += 0.5  # plenty of blanks
    got = ctc_greedy_search(lp, torch.tensor(lens))
    for b, n in enumerate(lens):
        best = [max(range(5), key=lambda v: float(lp[b, t, v])) for t in range(n)]
        assert got[b] == list(_collapse(best))
