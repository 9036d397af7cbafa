"""The runtime's numpy CTC searches equal the torch searches of wenet.decode: greedy,
prefix beam (plain, blank skipping, hotwords) and n-gram LM fusion.

Identical token sequences in the same n-best order; scores within 1e-5 (both run in
float32, numpy's and torch's logaddexp differ by an ulp at most per step; the LM search
runs in float64 in both: 1e-9). Random log-probabilities have no exact ties; the ties
that do occur in practice, dead (-inf) candidates when the beam exceeds the prefixes
there are, and argmax ties in greedy search, are checked to go the same way. Exact
ties between live candidates are where the two may differ: torch's CPU topk orders
them neither by index nor stably (``torch.ones(5).topk(3)`` gives 2, 4, 3 in torch 2.14).
"""
import numpy as np
import pytest
import torch

from tests.decode.test_ctc_lm import LM, UNITS as LM_UNITS
from tests.decode.toys import rand_logprobs
from wenet.decode import ctc as torch_ctc
from wenet.decode import ctc_lm as torch_ctc_lm
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.runtime import ctc_search

SCORE_TOL = 1e-5


def _same_nbest(ours, ref, tol=SCORE_TOL):
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert [h for h, _ in o] == [h for h, _ in r]
        assert [s for _, s in o] == pytest.approx([s for _, s in r], abs=tol, rel=0)


def _cases():
    # (batch, frames, vocabulary, seed, peakiness, lengths)
    return [(3, 30, 12, 0, 1.0, [30, 17, 5]), (2, 60, 40, 1, 3.0, [60, 41]),
            (4, 25, 7, 2, 0.3, [25, 25, 1, 12]), (1, 80, 30, 3, 5.0, [80])]


@pytest.mark.parametrize("B,T,V,seed,peaky,lens", _cases())
def test_greedy_equals_torch(B, T, V, seed, peaky, lens):
    lp = rand_logprobs(B, T, V, seed, peaky)
    ref = torch_ctc.ctc_greedy_search(lp, torch.tensor(lens))
    assert ctc_search.ctc_greedy_search(lp.numpy(), lens) == ref


def test_greedy_argmax_ties_take_the_first_unit_as_torch():
    lp = torch.log_softmax(torch.randint(0, 3, (2, 40, 6)).float(), dim=-1)  # many ties
    lens = [40, 33]
    assert ctc_search.ctc_greedy_search(lp.numpy(), lens) == torch_ctc.ctc_greedy_search(
        lp, torch.tensor(lens))


@pytest.mark.parametrize("B,T,V,seed,peaky,lens", _cases())
@pytest.mark.parametrize("beam,threshold", [(1, None), (4, 0.999), (10, None), (10, 0.9)])
def test_prefix_beam_equals_torch(B, T, V, seed, peaky, lens, beam, threshold):
    lp = rand_logprobs(B, T, V, seed, peaky)
    ref = torch_ctc.ctc_prefix_beam_search(lp, torch.tensor(lens), beam,
                                           blank_skip_threshold=threshold)
    ours = ctc_search.ctc_prefix_beam_search(lp.numpy(), lens, beam,
                                             blank_skip_threshold=threshold)
    _same_nbest(ours, ref)


def test_prefix_beam_with_more_room_than_prefixes_equals_torch():
    # 2 frames of 3 units: at most 7 prefixes, a beam of 16 holds many dead (-inf) slots
    lp = rand_logprobs(3, 2, 3, 5)
    for beam in (3, 16):
        _same_nbest(ctc_search.ctc_prefix_beam_search(lp.numpy(), [2, 1, 2], beam,
                                                      blank_skip_threshold=None),
                    torch_ctc.ctc_prefix_beam_search(lp, torch.tensor([2, 1, 2]), beam,
                                                     blank_skip_threshold=None))


@pytest.mark.parametrize("seed,score", [(0, 1.5), (1, 3.0), (2, 0.7)])
def test_hotword_biased_prefix_beam_equals_torch(seed, score):
    V = 10
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(1, V, size=int(rng.integers(1, 4))).tolist() for _ in range(4)]
    graph = ContextGraph(phrases, score)
    lp = rand_logprobs(3, 40, V, seed + 10, 2.0)
    lens = [40, 31, 9]
    for beam in (3, 10):
        ref = torch_ctc.ctc_prefix_beam_search(lp, torch.tensor(lens), beam, context_graph=graph)
        ours = ctc_search.ctc_prefix_beam_search(lp.numpy(), lens, beam, context_graph=graph)
        _same_nbest(ours, ref)
        # the bias changes the search: the unbiased n-best is different
        plain = ctc_search.ctc_prefix_beam_search(lp.numpy(), lens, beam)
        assert plain != ours


def test_context_tables_equal_the_graphs_torch_tables():
    graph = ContextGraph([[1, 2, 3], [2, 3], [4]], 2.5)
    ours = ctc_search.ContextTables.of(graph, 8)
    for a, b in zip(ours, graph.tables(8, torch.device("cpu"))):
        assert np.array_equal(a, b.numpy()) and a.dtype == b.numpy().dtype


@pytest.mark.parametrize("weight,bonus,restrict,beam", [
    (0.5, 0.0, True, 4), (1.0, 1.5, True, 10), (0.3, -0.5, False, 6), (0.0, 0.0, False, 3)])
def test_lm_fusion_equals_torch(weight, bonus, restrict, beam):
    fusion = LMFusion(LM, LM_UNITS, weight=weight, word_bonus=bonus, restrict_vocab=restrict)
    lp = rand_logprobs(3, 20, len(LM_UNITS), 11, 1.5)
    lens = [20, 14, 6]
    ref = torch_ctc_lm.ctc_lm_prefix_beam_search(lp, torch.tensor(lens), beam, fusion)
    ours = ctc_search.ctc_lm_prefix_beam_search(lp.numpy(), lens, beam, fusion)
    _same_nbest(ours, ref, tol=1e-9)
    assert any(ours)


def test_top_k_breaks_ties_by_lower_index():
    values = np.array([[1.0, 3.0, 3.0, -np.inf, 3.0, 2.0]])
    assert ctc_search.top_k(values, 4).tolist() == [[1, 2, 4, 5]]

