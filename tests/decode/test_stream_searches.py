"""The searches a stream carries from chunk to chunk equal their whole-utterance
references on the same frames: transducer greedy and modified beam search (standard and
multi-blank models, hotwords) against rnnt_greedy_search / rnnt_beam_search, and the
LM-fused CTC prefix beam search against ctc_lm_prefix_beam_search."""
import pytest
import torch

from tests.decode.test_ctc_lm import LM, UNITS
from tests.decode.toys import rand_logprobs, tiny_transducer, transducer_score_tol
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import CtcLmPrefixBeamState, LMFusion, ctc_lm_prefix_beam_search
from wenet.decode.transducer import (TransducerBeamState, TransducerGreedyState,
                                     rnnt_beam_search, rnnt_greedy_search)

PIECES = [(0, 1), (1, 4), (4, 5), (5, 13), (13, 14), (14, 23), (23, 30)]  # 30 frames


def _enc(T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, T, 16, generator=g) * 2


def _in_pieces(state, model, enc):
    """Feed the state the projected frames of ``enc`` (1, 30, D) in PIECES, each piece
    projected alone, as a stream projects each chunk."""
    for a, b in PIECES:
        state.advance(model.project_encoder(enc[:, a:b])[0])


@pytest.mark.parametrize("durations,max_sym", [((), 1), ((), 3), ((2, 4), 1)])
def test_greedy_over_pieces_equals_whole(durations, max_sym):
    model = tiny_transducer("lstm", durations, seed=1, big_bias=1.0)
    for seed in range(3):
        enc = _enc(30, seed)
        ref = rnnt_greedy_search(model, enc, torch.tensor([30]), max_sym)
        state = TransducerGreedyState(model, max_sym)
        _in_pieces(state, model, enc)
        (hyp, score), = state.nbest()
        assert list(hyp) == ref.hyps[0] and hyp, seed
        assert score == pytest.approx(ref.scores[0], abs=transducer_score_tol(score, 30))
        assert state.frames == 30


@pytest.mark.parametrize("durations,hotwords", [((), False), ((), True), ((2, 4), False),
                                                ((2, 3), True)])
def test_beam_over_pieces_equals_whole(durations, hotwords):
    """Same n-best (tokens, order); a multi-blank model's big blanks wait for the frames
    they land on, so the search lags (lookahead) until finish."""
    model = tiny_transducer("stateless", durations, seed=2, big_bias=1.0)
    for seed in range(3):
        enc = _enc(30, seed)
        graph = None
        if hotwords:  # phrases from the unbiased best: the bias then acts on it
            best = rnnt_beam_search(model, enc, torch.tensor([30]), 4)[0][0][0]
            graph = ContextGraph([list(best[:2]), list(best[3:6])], 1.5)
        ref = rnnt_beam_search(model, enc, torch.tensor([30]), 4, context_graph=graph)[0]
        state = TransducerBeamState(model, 4, context_graph=graph)
        _in_pieces(state, model, enc)
        lookahead = max(durations, default=1)
        assert state.searched == 30 - lookahead + 1
        got = state.finish()
        assert [h for h, _ in got] == [h for h, _ in ref] and ref[0][0], seed
        for (_, s), (_, r) in zip(got, ref):
            assert s == pytest.approx(r, abs=transducer_score_tol(r, 30))
        # every hypothesis' label_frame is a frame it could have taken its last label on
        assert all(-1 <= state.label_frame[h] < 30 for h, _ in got)


def test_partial_results_are_the_live_hypotheses():
    model = tiny_transducer("lstm", seed=1)
    enc = _enc(30, 0)
    state = TransducerBeamState(model, 4)
    state.advance(model.project_encoder(enc[:, :10])[0])
    partial = state.partial_nbest()
    assert {h for h, _ in partial} == set(state.pool.seq)
    assert [s for _, s in partial] == sorted((s for _, s in partial), reverse=True)
    # the live hypotheses of 10 frames are what the whole search keeps on 10 frames
    assert [h for h, _ in rnnt_beam_search(model, enc[:, :10], torch.tensor([10]), 4)[0]] == \
        [h for h, _ in partial]


@pytest.mark.parametrize("skip,restrict", [(0.999, True), (None, False), (0.9, True)])
def test_ctc_lm_over_pieces_equals_whole(skip, restrict):
    fusion = LMFusion(LM, UNITS, weight=0.7, word_bonus=0.3, restrict_vocab=restrict)
    for seed in range(4):
        lp = rand_logprobs(1, 30, len(UNITS), seed)
        lp[:, ::4, 0] += 3.0  # confident blanks, so that blank skipping happens
        lp = lp.log_softmax(-1)
        ref = ctc_lm_prefix_beam_search(lp, torch.tensor([30]), 5, fusion,
                                        blank_skip_threshold=skip)[0]
        state = CtcLmPrefixBeamState(5, fusion, blank_skip_threshold=skip)
        for a, b in PIECES:
            state.advance(lp[0, a:b])
        assert state.nbest() == ref and ref, seed
        assert state.frames == 30
