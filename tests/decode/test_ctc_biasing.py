"""Hotword biasing in CTC prefix beam search and attention rescoring, checked against
brute force and a plain reference search; without a graph the searches give exactly
what they gave before biasing existed (the git version of the modules)."""
import math
import subprocess
import types
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from tests.common import REPO
from tests.decode.test_context_graph import _brute_running, _occurrences
from tests.decode.test_ctc import _exhaustive
from tests.decode.toys import ToyDecoder, encoder_output, rand_logprobs
from wenet.decode import DecodeOptions, decode
from wenet.decode.attention import attention_rescoring, score_hyps
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc import ctc_prefix_beam_search

# The last commits of ctc.py / attention.py before hotword biasing was added.
CTC_BEFORE = "5661a06f4975ba0461f3b6e785688beeb5c93f99"
ATTENTION_BEFORE = "7a62df7709f3972dc501d292a62c6b2bb8cfd8ef"


def _git_module(commit, path):
    """``path`` as it was at ``commit``, imported as a throwaway module."""
    try:
        src = subprocess.run(["git", "-C", REPO, "show", f"{commit}:{path}"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history with {commit[:7]} is not available")
    module = types.ModuleType(f"before_biasing_{path.replace('/', '_')}")
    exec(compile(src, f"{commit[:7]}:{path}", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("T,V,seed,phrases", [
    (4, 3, 0, [[1, 2]]),
    (5, 4, 1, [[1, 2, 3], [2, 3], [3]]),
    (6, 3, 2, [[1, 1], [2, 1, 2]]),
    (6, 4, 3, [[3, 1, 2], [1, 3]]),
])
def test_biased_prefix_beam_equals_exhaustive(T, V, seed, phrases):
    """Wide beam, no pruning: every label sequence with its CTC score (sum over all
    alignments) plus the bonus it keeps (brute-force count of phrase occurrences)."""
    cs = 1.3
    lp = rand_logprobs(1, T, V, seed)
    ref = {y: s + cs * _occurrences(list(y), phrases) for y, s in _exhaustive(lp[0]).items()}
    graph = ContextGraph(phrases, cs)
    nbest = ctc_prefix_beam_search(lp, torch.tensor([T]), beam_size=1100,
                                   blank_skip_threshold=None, context_graph=graph)[0]
    got = dict(nbest)
    assert len(got) == len(nbest) and set(got) == set(ref)
    for y, s in ref.items():
        assert got[y] == pytest.approx(s, abs=1e-4)
    scores = [s for _, s in nbest]
    assert scores == sorted(scores, reverse=True)
    assert nbest[0][0] == max(ref, key=ref.get)


def _la(a, b):
    return float(torch.logaddexp(torch.tensor(a, dtype=torch.float64),
                                 torch.tensor(b, dtype=torch.float64)))


def _reference_biased(lp, beam, phrases, cs, skip=None):
    """Dict-based prefix beam search: the top-k tokens per frame extend the prefixes,
    which are pruned to ``beam`` by CTC score + the brute-force running bonus."""
    hyps = {(): (0.0, -math.inf)}
    for t in range(lp.size(0)):
        if skip is not None and float(lp[t, 0]) > math.log(skip):
            hyps = {y: (_la(b, nb) + float(lp[t, 0]), -math.inf) for y, (b, nb) in hyps.items()}
            continue
        nxt = defaultdict(lambda: [-math.inf, -math.inf])
        vals, ids = lp[t].topk(min(beam, lp.size(1)))
        for v, u in zip(vals.tolist(), ids.tolist()):
            for y, (b, nb) in hyps.items():
                if u == 0:
                    nxt[y][0] = _la(nxt[y][0], _la(b, nb) + v)
                elif y and y[-1] == u:
                    nxt[y][1] = _la(nxt[y][1], nb + v)
                    nxt[y + (u,)][1] = _la(nxt[y + (u,)][1], b + v)
                else:
                    nxt[y + (u,)][1] = _la(nxt[y + (u,)][1], _la(b, nb) + v)
        biased = {y: _la(*s) + _brute_running(list(y), phrases, cs) for y, s in nxt.items()}
        ranked = sorted(nxt.items(), key=lambda x: -biased[x[0]])[:beam]
        hyps = {y: tuple(s) for y, s in ranked if _la(*s) > -math.inf}
    final = [(y, _la(*s) + cs * _occurrences(list(y), phrases)) for y, s in hyps.items()]
    return sorted(final, key=lambda x: -x[1])


@pytest.mark.parametrize("beam,skip,seed", [(2, None, 0), (3, None, 1), (4, 0.999, 2),
                                            (3, 0.9, 3)])
def test_biased_pruned_batch_matches_reference(beam, skip, seed):
    lens = [14, 9, 12, 3]
    V = 6
    lp = rand_logprobs(len(lens), 14, V, 30 + seed, peaky=2.0)
    lp[:, ::3, 0] += 6.0  # blank-heavy frames, some above the skip threshold
    lp = torch.log_softmax(lp, -1)
    phrases = [[1, 2, 3], [2, 3], [4, 4], [5, 1]]
    cs = 1.5
    graph = ContextGraph(phrases, cs)
    out = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=beam,
                                 blank_skip_threshold=skip, context_graph=graph)
    for b, n in enumerate(lens):
        ref = _reference_biased(lp[b, :n], beam, phrases, cs, skip)
        assert [y for y, _ in out[b]] == [y for y, _ in ref]
        assert [s for _, s in out[b]] == pytest.approx([s for _, s in ref], abs=1e-4)


def test_bias_changes_the_winner():
    """A hotword that is acoustically second best wins once it is in the list."""
    # Frames favour 1 2 slightly over 1 3; the phrase "1 3" with a bonus flips it.
    p = torch.tensor([[0.1, 0.8, 0.05, 0.05], [0.6, 0.2, 0.1, 0.1],
                      [0.1, 0.05, 0.45, 0.4], [0.8, 0.1, 0.05, 0.05]])
    lp = p.log().unsqueeze(0)
    plain = ctc_prefix_beam_search(lp, torch.tensor([4]), beam_size=4)[0]
    biased = ctc_prefix_beam_search(lp, torch.tensor([4]), beam_size=4,
                                    context_graph=ContextGraph([[1, 3]], 0.5))[0]
    assert plain[0][0] == (1, 2) and biased[0][0] == (1, 3)


@pytest.mark.parametrize("beam,skip", [(1, 0.999), (3, None), (5, 0.999), (10, 0.95)])
def test_no_graph_identical_to_before_biasing(beam, skip):
    before = _git_module(CTC_BEFORE, "wenet/decode/ctc.py")
    lens = torch.tensor([20, 13, 1, 17, 8])
    for seed in range(3):
        lp = rand_logprobs(5, 20, 12, 50 + seed, peaky=3.0)
        lp[:, ::2, 0] += 6.0
        lp = torch.log_softmax(lp, -1)
        old = before.ctc_prefix_beam_search(lp, lens, beam, blank_skip_threshold=skip)
        new = ctc_prefix_beam_search(lp, lens, beam, blank_skip_threshold=skip)
        assert new == old  # same prefixes, same float scores, same order


@pytest.mark.parametrize("weights", [(0.5, 0.0), (0.3, 0.4)])
def test_rescoring_no_graph_identical_to_before(weights):
    before = _git_module(ATTENTION_BEFORE, "wenet/decode/attention.py")
    V, sos = 9, 8
    dec = ToyDecoder(V, seed=2)
    lens = [11, 6, 9]
    enc, mask = encoder_output(3, 11, 8, lens, 3)
    lp = rand_logprobs(3, 11, V, 4, peaky=1.5)
    nbests = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=6)
    old = before.attention_rescoring(dec, enc, mask, nbests, sos, sos, *weights)
    assert attention_rescoring(dec, enc, mask, nbests, sos, sos, *weights) == old


def test_rescoring_adds_the_kept_bonus():
    V, sos, cs = 9, 8, 2.0
    phrases = [[2, 3], [5]]
    graph = ContextGraph(phrases, cs)
    dec = ToyDecoder(V, seed=6)
    lens = [11, 6, 9]
    enc, mask = encoder_output(3, 11, 8, lens, 7)
    lp = rand_logprobs(3, 11, V, 8, peaky=1.0)
    lp[..., sos] = -1e4  # CTC never emits sos/eos
    nbests = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=8, context_graph=graph)
    got = attention_rescoring(dec, enc, mask, nbests, sos, sos, 0.5, context_graph=graph)
    for b in range(3):
        hyps = [h for h, _ in nbests[b]]
        l2r, _ = score_hyps(dec, enc, mask, hyps, torch.full((len(hyps),), b), sos, sos)
        total = [float(l2r[i]) + 0.5 * s + cs * _occurrences(list(h), phrases)
                 for i, (h, s) in enumerate(nbests[b])]
        best = max(range(len(total)), key=total.__getitem__)
        assert got[b][0] == list(hyps[best])
        assert got[b][1] == pytest.approx(total[best], abs=1e-4)


def test_decode_options_carry_the_graph():
    """decode() with DecodeOptions(context_graph=...) equals the searches called with it."""
    V, sos = 9, 8
    lens = torch.tensor([11, 6])
    enc, mask = encoder_output(2, 11, 8, lens.tolist(), 9)
    lp = rand_logprobs(2, 11, V, 10, peaky=1.5)
    model = SimpleNamespace(ctc_logprobs=lambda _: lp, decoder=ToyDecoder(V, seed=1),
                            sos=sos, eos=sos)
    graph = ContextGraph([[1, 2], [3]], 1.5)
    opts = DecodeOptions(beam_size=5, ctc_weight=0.5, context_graph=graph)
    res = decode(model, enc, mask, ["ctc_prefix_beam_search", "attention_rescoring"], opts)
    nbests = ctc_prefix_beam_search(lp, lens, 5, context_graph=graph)
    assert res["ctc_prefix_beam_search"].hyps == [list(n[0][0]) for n in nbests]
    resc = attention_rescoring(model.decoder, enc, mask, nbests, sos, sos, 0.5,
                               context_graph=graph)
    assert res["attention_rescoring"].hyps == [h for h, _ in resc]
