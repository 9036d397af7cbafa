"""Zipformer scaling modules against their formulas: SwooshR/L, BiasNorm, ScheduledFloat,
and the gradient-only constraints (Balancer, Whiten, the bypass scale limit)."""
import math
import random

import pytest
import torch

from wenet.export.jit import script_model
from wenet.zipformer.block import BypassModule
from wenet.zipformer.scaling import (Balancer, BiasNorm, ScheduledFloat, SwooshL, SwooshR,
                                     Whiten, apply_schedules, scheduled, shared_dropout,
                                     whitening_metric)

POINTS = [-30.0, -4.5, -1.0, -1e-3, 0.0, 0.5, 1.0, 3.9, 4.0, 7.25, 30.0]


def test_swoosh_r_and_l_equal_their_formulas():
    x = torch.tensor(POINTS, dtype=torch.float64)
    r = SwooshR()(x).tolist()
    l_ = SwooshL()(x).tolist()
    for v, got_r, got_l in zip(POINTS, r, l_):
        assert got_r == pytest.approx(math.log(1 + math.exp(v - 1)) - 0.08 * v - 0.313261687,
                                      abs=1e-12)
        assert got_l == pytest.approx(math.log(1 + math.exp(v - 4)) - 0.08 * v - 0.035,
                                      abs=1e-12)
    # the offset makes SwooshR(0) = 0 (to the 9 digits the paper gives)
    assert abs(SwooshR()(torch.zeros(1, dtype=torch.float64)).item()) < 1e-9


def test_bias_norm_equals_its_formula():
    torch.manual_seed(0)
    norm = BiasNorm(5).double()
    with torch.no_grad():
        norm.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0, 1.0]))
        norm.log_scale.fill_(0.4)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    y = norm(x)
    for b in range(2):
        for t in range(3):
            row = x[b, t].tolist()
            rms = math.sqrt(sum((v - c) ** 2 for v, c in zip(row, norm.bias.tolist())) / 5)
            want = [v / rms * math.exp(0.4) for v in row]
            assert y[b, t].tolist() == pytest.approx(want, rel=1e-7)


def test_scheduled_float_is_piecewise_linear_and_applied():
    s = ScheduledFloat((0.0, 0.3), (100.0, 0.1), (300.0, 0.0))
    assert [s(b) for b in (-5, 0, 50, 100, 200, 300, 1e6)] == pytest.approx(
        [0.3, 0.3, 0.2, 0.1, 0.05, 0.0, 0.0])
    fast = ScheduledFloat((0.0, 0.3), (100.0, 0.1), scale=0.1)
    assert fast(5.0) == pytest.approx(0.2)
    module = torch.nn.Linear(2, 2)
    scheduled(module, "rate", s)
    outer = torch.nn.Sequential(module)
    assert module.rate == pytest.approx(0.3)
    apply_schedules(outer, 50)
    assert module.rate == pytest.approx(0.2)
    with pytest.raises(ValueError):
        ScheduledFloat((10.0, 1.0), (5.0, 0.0))


def _grad_through(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor):
    x = x.clone().requires_grad_(True)
    y = module(x)
    assert torch.equal(y, x)  # identity forward
    y.backward(grad)
    return x.grad


def test_balancer_pushes_a_negative_channel_up_and_is_off_unless_enabled():
    torch.manual_seed(0)
    x = torch.randn(50, 3)
    x[:, 0] = -x[:, 0].abs() - 0.5   # channel 0 never positive
    grad = torch.zeros(50, 3)
    grad[:, 1:] = torch.randn(50, 2)
    bal = Balancer(True, min_positive=0.05, max_positive=0.95, min_abs=0.0, max_abs=100.0,
                   grad_scale=0.04).train()
    g = _grad_through(bal, x, grad)
    step = 0.04 * grad.abs().mean()
    # a descent step -g moves channel 0 up; the others (within limits) keep their gradient
    assert torch.allclose(g[:, 0], torch.full((50,), -step.item()))
    assert torch.equal(g[:, 1:], grad[:, 1:])
    assert torch.equal(_grad_through(Balancer(False).train(), x, grad), grad)
    assert torch.equal(_grad_through(bal.eval(), x, grad), grad)


def test_shared_dropout_drops_whole_channels_at_its_rate():
    torch.manual_seed(0)
    x = torch.rand(64, 30, 50) + 0.5  # no zeros of its own
    y = shared_dropout(x, 0.3, training=True)
    kept = y != 0
    # one decision per (utterance, channel), the same in every frame
    assert torch.equal(kept, kept[:, :1, :].expand_as(kept))
    assert torch.allclose(y[kept], (x / 0.7)[kept])
    share = 1.0 - kept[:, 0, :].float().mean().item()
    assert abs(share - 0.3) < 4 * math.sqrt(0.3 * 0.7 / (64 * 50))  # 4 sigma
    assert shared_dropout(x, 0.3, training=False) is x
    assert shared_dropout(x, 0.0, training=True) is x


def test_balancer_acts_on_its_scheduled_share_of_calls():
    """prob follows its schedule; each training call nudges the gradient with that
    probability (Python's random), and otherwise passes it unchanged."""
    x = torch.randn(40, 3)
    x[:, 0] = -x[:, 0].abs() - 0.5   # out of limits: every acting call changes channel 0
    grad = torch.randn(40, 3)
    bal = Balancer(True, min_positive=0.05, max_positive=0.95, min_abs=0.0,
                   prob=ScheduledFloat((0.0, 0.5), (100.0, 0.1))).train()
    assert bal.prob == 0.5
    apply_schedules(bal, 50.0)
    assert bal.prob == pytest.approx(0.3)
    random.seed(3)
    acted = sum(not torch.equal(_grad_through(bal, x, grad), grad) for _ in range(400))
    random.seed(3)
    want = sum(random.random() < 0.3 for _ in range(400))
    assert acted == want
    apply_schedules(bal, 1000.0)
    assert bal.prob == pytest.approx(0.1)


def test_whiten_acts_often_while_above_its_limit_and_rarely_once_below():
    torch.manual_seed(0)
    white = torch.randn(500, 4)                                   # metric ~1
    skewed = torch.randn(500, 1) * torch.tensor([[1.0, 2.0, -1.0, 0.5]]) \
        + 0.01 * torch.randn(500, 4)                              # metric ~4
    grad = torch.randn(500, 4)
    w = Whiten(True, limit=2.0, grad_scale=0.1, min_prob=0.0, max_prob=1.0).train()
    assert w.current_prob() == 1.0          # at first: as if above the limit
    assert not torch.equal(_grad_through(w, skewed, grad), grad)
    assert w.current_prob() == 1.0
    assert torch.equal(_grad_through(w, white, grad), grad)  # measured below the limit
    assert w.current_prob() == 0.0
    # min_prob 0: it does not act (nor measure) again, even on skewed features
    assert torch.equal(_grad_through(w, skewed, grad), grad)


def test_whitening_metric_and_whiten_gradient():
    torch.manual_seed(0)
    white = torch.randn(20000, 4)
    assert whitening_metric(white).item() == pytest.approx(1.0, abs=0.01)
    rank_one = torch.randn(100, 1) * torch.tensor([[1.0, 2.0, -1.0, 0.5]])
    assert whitening_metric(rank_one).item() == pytest.approx(4.0, rel=1e-4)
    x = rank_one + 0.01 * torch.randn(100, 4)
    grad = torch.randn(100, 4)
    g = _grad_through(Whiten(True, limit=2.0, grad_scale=0.1).train(), x, grad)
    extra = g - grad
    assert extra.norm().item() == pytest.approx(0.1 * grad.norm().item(), rel=1e-4)
    # the added term lowers the metric along a small descent step
    assert whitening_metric(x - 1e-3 * extra / extra.norm()) < whitening_metric(x)
    assert torch.equal(_grad_through(Whiten(True, limit=5.0).train(), x, grad), grad)


def test_bypass_is_an_interpolation_whose_scale_limit_only_touches_gradients():
    bypass = BypassModule(3, ScheduledFloat((0.0, 0.5)))
    with torch.no_grad():
        bypass.scale.copy_(torch.tensor([0.2, 0.7, 1.3]))
    orig, x = torch.randn(4, 3), torch.randn(4, 3)
    want = orig + (x - orig) * torch.tensor([0.2, 0.7, 1.3])
    assert torch.allclose(bypass.eval()(orig, x), want)
    out = bypass.train()(orig, x)
    assert torch.allclose(out, want)
    (out * (x - orig)).sum().backward()  # gradient of scale: sum (x - orig)^2 > 0
    g = bypass.scale.grad
    assert g[0] < 0 and g[1] > 0 and g[2] > 0  # below the minimum 0.5: reversed, pushed up


def test_swoosh_gradients_and_the_scripted_formula():
    x = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: SwooshR()(v), (x,))
    assert torch.autograd.gradcheck(lambda v: SwooshL()(v), (x,))
    # TorchScript runs the out-of-place formula: the same numbers
    y = torch.randn(1000) * 10
    for mod in (SwooshR(), SwooshL()):
        assert torch.equal(script_model(mod)(y), mod(y))
