"""The runtime's numpy attention rescoring equals wenet.decode.attention's on a tiny
U2++ model (bitransformer decoder): the same winner per utterance, totals within 1e-4
(float32 sums of a few log-probabilities ~ -10 each), the first hypothesis on exact ties,
the reverse weight, the first-pass weight and the hotword bonus as recognize.py applies them.

The numpy side gets the decoder's log-probabilities the way decoder.onnx computes them
(``ASRModel.forward_attention_decoder``, one utterance at a time, unpadded encoder output);
the torch side runs the batched, padded decoder call of ``attention_rescoring``.
"""
import numpy as np
import pytest
import torch

from tests.tiny_experiment import tiny_config
from wenet.decode import attention as torch_attention
from wenet.decode.context_graph import ContextGraph
from wenet.models import init_model
from wenet.runtime import rescoring


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return init_model(tiny_config()).eval().requires_grad_(False)


def _decoder(model):
    def scores(hyps, hyps_lens, encoder_out):
        with torch.no_grad():
            s, r = model.forward_attention_decoder(
                torch.from_numpy(hyps), torch.from_numpy(hyps_lens),
                torch.from_numpy(encoder_out), model.reverse_weight)
        return s.numpy(), r.numpy()
    return scores


def _batch(seed):
    rng = np.random.default_rng(seed)
    lens = [9, 6, 3]
    enc = torch.from_numpy(rng.standard_normal((3, 9, 32)).astype(np.float32))
    mask = (torch.arange(9)[None, :] < torch.tensor(lens)[:, None]).unsqueeze(1)
    nbests = []
    for b in range(3):
        nb = [(tuple(rng.integers(1, 7, size=int(rng.integers(0, 5))).tolist()),
               float(np.float32(-rng.uniform(0, 10)))) for _ in range(int(rng.integers(1, 6)))]
        nbests.append(nb)
    return enc, mask, lens, nbests


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ctc_weight,reverse_weight", [(0.0, 0.0), (0.5, 0.0), (0.5, 0.3),
                                                       (2.0, 1.0)])
@pytest.mark.parametrize("hotwords", [False, True])
def test_rescoring_equals_torch(model, seed, ctc_weight, reverse_weight, hotwords):
    enc, mask, lens, nbests = _batch(seed)
    graph = ContextGraph([[1, 2], [3, 3]], 1.5) if hotwords else None
    ref = torch_attention.attention_rescoring(model.decoder, enc, mask, nbests, model.sos,
                                              model.eos, ctc_weight, reverse_weight, graph)
    ours = rescoring.attention_rescoring(_decoder(model), enc.numpy(), lens, nbests,
                                         model.sos, model.eos, ctc_weight, reverse_weight, graph)
    for (h, s), (rh, rs) in zip(ours, ref):
        assert h == rh
        assert s == pytest.approx(rs, abs=1e-4, rel=0)


def test_exact_ties_go_to_the_first_hypothesis(model):
    enc, mask, lens, _ = _batch(3)
    # the same tokens twice (equal totals) after a worse one; and an empty n-best
    nbests = [[((1, 2), -9.0), ((3,), -1.0), ((3,), -1.0)], [], [((), -2.0), ((), -2.0)]]
    ref = torch_attention.attention_rescoring(model.decoder, enc, mask, nbests, model.sos,
                                              model.eos, 0.5)
    ours = rescoring.attention_rescoring(_decoder(model), enc.numpy(), lens, nbests,
                                         model.sos, model.eos, 0.5)
    assert [h for h, _ in ours] == [h for h, _ in ref]
    assert ours[1] == ([], float("-inf"))


def test_reverse_weight_without_a_right_to_left_decoder_is_refused(model):
    def no_r2l(hyps, hyps_lens, encoder_out):
        s, _ = _decoder(model)(hyps, hyps_lens, encoder_out)
        return s, np.zeros((), dtype=np.float32)
    enc, _, lens, nbests = _batch(0)
    with pytest.raises(ValueError, match="needs a right-to-left decoder"):
        rescoring.attention_rescoring(no_r2l, enc.numpy(), lens, nbests, 7, 7, 0.5, 0.3)
