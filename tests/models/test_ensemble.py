"""EnsembleModel: K models decoded as one, their CTC and decoder posteriors averaged.

References: each model's own scores (the weighted mean of probabilities computed by
hand), the wrapped model itself (K = 1 and K identical copies decode exactly as it does),
and the decoder's batched forward (the step-by-step search with the joined cache must
give the same distributions)."""
import copy
import math

import pytest
import torch

from tests.tiny_experiment import tiny_config, sharpen, TRANSDUCER
from wenet.decode import DecodeOptions, decode
from wenet.models import init_model
from wenet.models.ensemble import EnsembleModel
from wenet.utils.mask import subsequent_mask

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


def _model(seed, **changes):
    torch.manual_seed(seed)
    model = init_model(tiny_config({"dataset_conf": {"resample_conf": None}}, changes))
    sharpen(model, ctc=8.0, eos=1.0)
    return model.eval()


def _feats(seed=0, lens=(60, 41, 52)):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(len(lens), max(lens), 20, generator=g)
    return feats, torch.tensor(lens)


def _own(model, feats, lens):
    with torch.no_grad():
        out, mask = model.encode(feats, lens)
        return out, mask, model.ctc_logprobs(out)


def test_ctc_posteriors_are_the_weighted_mean_of_the_models():
    a, b = _model(0), _model(1)
    feats, lens = _feats()
    ens = EnsembleModel([a, b], weights=[3.0, 1.0]).eval()
    with torch.no_grad():
        out, mask = ens.encode(feats, lens)
        got = ens.ctc_logprobs(out)
    _, mask_a, lp_a = _own(a, feats, lens)
    _, _, lp_b = _own(b, feats, lens)
    want = torch.log(0.75 * lp_a.exp() + 0.25 * lp_b.exp())
    assert torch.equal(mask, mask_a)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got.exp().sum(-1), torch.ones(got.shape[:2]), atol=1e-5)
    assert not torch.allclose(lp_a, lp_b, atol=1e-2)  # the two models do differ


def test_one_model_and_identical_copies_decode_as_the_model():
    model = _model(0)
    feats, lens = _feats(3)
    opts = DecodeOptions(beam_size=4, ctc_weight=0.5, reverse_weight=0.3)
    with torch.no_grad():
        out, mask = model.encode(feats, lens)
        want = {m: r.hyps for m, r in decode(model, out, mask, MODES, opts).items()}
    assert any(h for hyps in want.values() for h in hyps)  # not a comparison of empties
    for members in ([model], [model, copy.deepcopy(model), copy.deepcopy(model)]):
        ens = EnsembleModel(members).eval()
        with torch.no_grad():
            e_out, e_mask = ens.encode(feats, lens)
            assert torch.allclose(ens.ctc_logprobs(e_out), model.ctc_logprobs(out), atol=1e-5)
            got = {m: r.hyps for m, r in decode(ens, e_out, e_mask, MODES, opts).items()}
        assert got == want, len(members)


def test_decoder_scores_are_the_mean_and_steps_match_the_batched_forward():
    a, b = _model(0), _model(2, decoder_conf={"num_blocks": 2})  # caches of 1 and 2 layers
    feats, lens = _feats(1, (50, 50))
    ens = EnsembleModel([a, b], weights=[1.0, 2.0]).eval()
    ys = torch.tensor([[ens.sos, 3, 4, 6, 5], [ens.sos, 6, 6, 3, 4]])
    ys_lens = torch.tensor([5, 5])
    r_ys = torch.tensor([[ens.sos, 5, 6, 4, 3], [ens.sos, 4, 3, 6, 6]])
    with torch.no_grad():
        out, mask = ens.encode(feats, lens)
        left, right, _ = ens.decoder(out, mask, ys, ys_lens, r_ys, 0.3)
        own = []
        for model in (a, b):
            enc, m = model.encode(feats, lens)
            l_x, r_x, _ = model.decoder(enc, m, ys, ys_lens, r_ys, 0.3)
            own.append((torch.log_softmax(l_x, -1), torch.log_softmax(r_x, -1)))
        for got, k in ((left, 0), (right, 1)):
            want = torch.log(own[0][k].exp() / 3 + 2 * own[1][k].exp() / 3)
            assert torch.allclose(got, want, atol=1e-5)
        # step by step with the joined cache (the attention beam search's path)
        cache = None
        for j in range(ys.size(1)):
            tgt = ys[:, :j + 1]
            tgt_mask = subsequent_mask(j + 1).unsqueeze(0).expand(2, -1, -1)
            step, cache = ens.decoder.forward_one_step(out, mask, tgt, tgt_mask, cache)
            assert torch.allclose(step, left[:, j], atol=1e-4), j
    assert ens.cache_sizes == [1, 2]


def test_ensembles_that_cannot_be_built_are_refused():
    a = _model(0)
    with pytest.raises(ValueError, match="units"):
        wide = init_model(tiny_config({"dataset_conf": {"resample_conf": None},
                                       "output_dim": 9}))
        EnsembleModel([a, wide])
    with pytest.raises(ValueError, match="subsamples"):
        EnsembleModel([a, _model(0, encoder_conf={"input_layer": "conv2d6"})])
    with pytest.raises(ValueError, match="transducer"):
        EnsembleModel([a, init_model(tiny_config(TRANSDUCER))])
    with pytest.raises(ValueError, match="weight"):
        EnsembleModel([a, a], weights=[1.0])
    with pytest.raises(ValueError, match="weight"):
        EnsembleModel([a, a], weights=[1.0, 0.0])
    with pytest.raises(ValueError, match="at least one"):
        EnsembleModel([])


def test_log_weights_sum_to_one():
    ens = EnsembleModel([_model(0), _model(1), _model(2)], weights=[1, 2, 5])
    assert math.isclose(float(ens.log_weights.exp().sum()), 1.0, rel_tol=1e-6)
    assert torch.allclose(ens.log_weights.exp(), torch.tensor([1 / 8, 2 / 8, 5 / 8]))
