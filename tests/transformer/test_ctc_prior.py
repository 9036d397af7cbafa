"""CTC with label priors (wenet/transformer/ctc.py ``CTC.loss``, wenet/transformer/losses.py
``CTCLoss(prior_weight=...)``) against a brute-force sum over every frame labelling."""
import itertools

import pytest
import torch

from wenet.models import init_model
from wenet.models.losses import loss_confs
from wenet.transformer.ctc import CTC
from wenet.transformer.losses import CTCLoss


def collapse(path):
    out, prev = [], None
    for c in path:
        if c != prev and c != 0:
            out.append(c)
        prev = c
    return out


def brute_force_loss(scores: torch.Tensor, lens, targets) -> torch.Tensor:
    """-sum_b log sum over the label sequences of length T_b that collapse to the target
    of exp(sum_t scores[t, b, path_t]); scores (T, B, V) need not be normalised."""
    total = scores.new_zeros(())
    vocab = scores.size(2)
    for b, (length, target) in enumerate(zip(lens, targets)):
        terms = [sum(scores[t, b, c] for t, c in enumerate(path))
                 for path in itertools.product(range(vocab), repeat=length)
                 if collapse(path) == target]
        if terms:  # an impossible target adds nothing (zero_infinity)
            total = total - torch.logsumexp(torch.stack(terms), 0)
    return total


def test_prior_loss_and_gradient_equal_brute_force():
    g = torch.Generator().manual_seed(0)
    ctc = CTC(4, 3).double()
    hs = torch.randn(3, 6, 3, dtype=torch.float64, generator=g, requires_grad=True)
    hlens = torch.tensor([6, 5, 2])
    ys = torch.tensor([[1, 2, 2], [3, -1, -1], [1, 2, 3]])  # the third cannot fit 2 frames
    ylens = torch.tensor([3, 1, 3])
    prior = torch.softmax(torch.randn(4, dtype=torch.float64, generator=g), 0)
    log_prior = 0.7 * prior.log()
    loss = ctc.loss(ctc.frame_log_probs(hs), hlens, ys, ylens, log_prior)
    (grad,) = torch.autograd.grad(loss, hs)

    hs_ref = hs.detach().clone().requires_grad_(True)
    scores = ctc.frame_log_probs(hs_ref) - log_prior
    targets = [[1, 2, 2], [3], [1, 2, 3]]
    ref = brute_force_loss(scores, hlens.tolist(), targets) / 3
    (grad_ref,) = torch.autograd.grad(ref, hs_ref)
    assert torch.allclose(loss, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(grad, grad_ref, rtol=1e-9, atol=1e-12)
    # torch's CTC alone on the unnormalised scores has the right value but not the right
    # gradient (it assumes each frame sums to one): the reason for the normaliser
    bad = torch.nn.functional.ctc_loss(ctc.frame_log_probs(hs) - log_prior, ys, hlens, ylens,
                                       reduction="sum", zero_infinity=True) / 3
    (grad_bad,) = torch.autograd.grad(bad, hs)
    assert torch.allclose(bad, ref, rtol=1e-12)
    assert not torch.allclose(grad_bad, grad_ref, rtol=1e-3)


def test_uniform_prior_shifts_every_path_equally():
    g = torch.Generator().manual_seed(1)
    ctc = CTC(5, 4).double()
    hs = torch.randn(2, 7, 4, dtype=torch.float64, generator=g)
    hlens = torch.tensor([7, 4])
    ys = torch.tensor([[1, 3], [2, -1]])
    ylens = torch.tensor([2, 1])
    plain = ctc(hs, hlens, ys, ylens)
    c = 0.5 * torch.log(torch.tensor(1 / 5, dtype=torch.float64))
    log_prior = torch.full((5,), float(c), dtype=torch.float64)
    shifted = ctc.loss(ctc.frame_log_probs(hs), hlens, ys, ylens, log_prior)
    # every path of utterance b gains -c per frame: the loss grows by c * sum(hlens) / B
    assert torch.allclose(shifted, plain + c * 11 / 2, rtol=1e-12)


def test_prior_is_the_moving_mean_posterior_of_valid_frames():
    loss = CTCLoss(weight=1.0, prior_weight=0.3, prior_momentum=0.25)
    model = torch.nn.Module()
    model.ctc = CTC(3, 2)
    loss.attach(model)
    assert torch.equal(loss.prior, torch.full((3,), 1 / 3))
    probs = torch.tensor([[[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]],
                          [[0.25, 0.5, 0.25], [0.1, 0.1, 0.8]]])  # (T 2, B 2, V 3)
    loss.update_prior(probs.log(), torch.tensor([2, 1]))  # frame (1, 1) is padding
    mean = torch.tensor([0.5 + 0.9 + 0.25, 0.25 + 0.05 + 0.5, 0.25 + 0.05 + 0.25]) / 3
    assert torch.allclose(loss.prior, 0.75 * torch.full((3,), 1 / 3) + 0.25 * mean)
    assert torch.isclose(loss.prior.sum(), torch.tensor(1.0))


def test_prior_options_from_config_and_kept_in_the_state_dict(tmp_path):
    configs = {"input_dim": 80, "output_dim": 20, "encoder": "transformer",
               "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 32,
                                "num_blocks": 1, "input_layer": "conv2d"},
               "decoder": "transformer",
               "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1},
               "model_conf": {"ctc_weight": 0.4, "ctc_prior_weight": 0.3}}
    losses, _ = loss_confs(configs, transducer=False)
    assert losses["ctc"] == {"weight": 0.4, "prior_weight": 0.3}
    model = init_model(configs)
    assert model.losses["ctc"].prior_weight == 0.3
    assert "losses.ctc.prior" in model.state_dict()
    model.train()
    feats = torch.randn(2, 40, 80)
    out = model(feats, torch.tensor([40, 31]), torch.tensor([[1, 2, 3], [4, 5, -1]]),
                torch.tensor([3, 2]))
    assert torch.isfinite(out["loss"])
    assert not torch.allclose(model.losses["ctc"].prior, torch.full((20,), 1 / 20))
    reloaded = init_model(configs)
    reloaded.load_state_dict(model.state_dict())  # strict: the prior travels with the model
    assert torch.equal(reloaded.losses["ctc"].prior, model.losses["ctc"].prior)
    plain = init_model({**configs, "model_conf": {"ctc_weight": 0.4}})
    assert "losses.ctc.prior" not in plain.state_dict()


@pytest.mark.parametrize("kwargs", [{"prior_weight": -0.1}, {"prior_momentum": 0.0},
                                    {"prior_momentum": 1.5}])
def test_prior_options_are_checked(kwargs):
    with pytest.raises(ValueError, match="prior"):
        CTCLoss(**kwargs)
