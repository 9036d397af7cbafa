"""The runtime's numpy transducer searches equal wenet.decode.transducer's on tiny models:
greedy (max_sym_per_frame 1 and 3) and modified beam search, stateless and LSTM
predictors, multi-blank models, hotwords, length normalisation.

The numpy searches see the model through numpy functions (the same torch modules, so the
network is exact); identical n-best token sequences in the same order, scores within
``transducer_score_tol`` (float32 log-softmax by numpy vs torch: a few ulps per frame).
"""
from typing import List, Tuple

import numpy as np
import pytest
import torch

from tests.decode.toys import tiny_transducer, transducer_score_tol
from wenet.decode import transducer as torch_search
from wenet.decode.context_graph import ContextGraph
from wenet.runtime import transducer_search


class NumpyNet:
    """A torch TransducerModel behind the runtime's numpy interface (TransducerNet)."""

    def __init__(self, model) -> None:
        self.model = model
        self.blank_id = model.blank_symbol()
        self.big_blank_ids = list(model.big_blank_ids())
        self.big_blank_durations = list(model.big_blank_durations())

    @torch.no_grad()
    def project_encoder(self, encoder_out: np.ndarray) -> np.ndarray:
        return self.model.project_encoder(torch.from_numpy(encoder_out)).numpy()

    def predictor_init_state(self, n: int) -> List[np.ndarray]:
        return [s.numpy() for s in self.model.predictor_init_state(n)]

    @torch.no_grad()
    def predictor_step(self, tokens, state) -> Tuple[np.ndarray, List[np.ndarray]]:
        pred, new = self.model.forward_predictor_step(
            torch.from_numpy(np.asarray(tokens, dtype=np.int64)),
            [torch.from_numpy(np.ascontiguousarray(s)) for s in state])
        return pred.numpy(), [s.numpy() for s in new]

    @torch.no_grad()
    def joint(self, enc_proj, pred_proj) -> np.ndarray:
        return self.model.forward_joint_step(torch.from_numpy(np.ascontiguousarray(enc_proj)),
                                             torch.from_numpy(pred_proj)).numpy()


def _enc(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, 16, generator=g) * 2


def _same_nbest(ours, ref, frames):
    assert len(ours) == len(ref)
    for o, r, n in zip(ours, ref, frames):
        assert [h for h, _ in o] == [h for h, _ in r]
        for (_, a), (_, b) in zip(o, r):
            assert a == pytest.approx(b, abs=transducer_score_tol(b, n), rel=0)


MODELS = [("stateless", ()), ("lstm", ()), ("stateless", (2, 3)), ("lstm", (2,))]


@pytest.mark.parametrize("predictor,durations", MODELS)
@pytest.mark.parametrize("max_sym", [1, 3])
def test_greedy_equals_torch(predictor, durations, max_sym):
    model = tiny_transducer(predictor, durations, big_bias=1.0)
    enc, lens = _enc(3, 14, 1), [14, 9, 3]
    ref = torch_search.rnnt_greedy_search(model, enc, torch.tensor(lens), max_sym).hyps
    ours = transducer_search.rnnt_greedy_search(NumpyNet(model), enc.numpy(), lens, max_sym)
    assert ours == ref
    assert any(ref)


@pytest.mark.parametrize("predictor,durations", MODELS)
@pytest.mark.parametrize("beam,length_norm", [(1, False), (4, False), (6, True)])
def test_beam_equals_torch(predictor, durations, beam, length_norm):
    model = tiny_transducer(predictor, durations, seed=2, big_bias=0.5)
    enc, lens = _enc(3, 12, 3), [12, 7, 2]
    ref = torch_search.rnnt_beam_search(model, enc, torch.tensor(lens), beam, length_norm)
    ours = transducer_search.rnnt_beam_search(NumpyNet(model), enc.numpy(), lens, beam,
                                              length_norm)
    _same_nbest(ours, ref, lens)
    assert any(h for nb in ref for h, _ in nb)


@pytest.mark.parametrize("durations", [(), (2,)])
def test_hotword_beam_equals_torch(durations):
    model = tiny_transducer("stateless", durations, seed=4)
    enc, lens = _enc(2, 15, 5), [15, 11]
    graph = ContextGraph([[1, 2], [3], [4, 4, 1]], 2.0)
    ref = torch_search.rnnt_beam_search(model, enc, torch.tensor(lens), 4, context_graph=graph)
    ours = transducer_search.rnnt_beam_search(NumpyNet(model), enc.numpy(), lens, 4,
                                              context_graph=graph)
    _same_nbest(ours, ref, lens)
    plain = transducer_search.rnnt_beam_search(NumpyNet(model), enc.numpy(), lens, 4)
    assert [[h for h, _ in nb] for nb in plain] != [[h for h, _ in nb] for nb in ours]


def test_log_softmax_equals_torch():
    x = torch.randn(50, 9) * 7
    np.testing.assert_allclose(transducer_search.log_softmax(x.numpy()),
                               torch.log_softmax(x, dim=-1).numpy(), rtol=0, atol=2e-6)
