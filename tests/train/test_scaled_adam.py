"""ScaledAdam against a plain-Python transcription of its update equations
(wenet/train/scaled_adam.py module docstring): lists and floats only on the
reference's update path, several updates, the learnt scale, the RMS limits and the
median-based clipping included; and a state_dict round trip mid-run."""
from __future__ import annotations

import io
import math
import random

import pytest
import torch

from wenet.train.optim import build_optimizer
from wenet.train.scaled_adam import ScaledAdam, add_scaled_ratio

CONF = dict(lr=0.05, betas=(0.9, 0.98), scalar_lr_scale=0.1, eps=1e-8, param_min_rms=1e-5,
            param_max_rms=3.0, scalar_max=2.0, size_update_period=2, clipping_scale=0.8)


def _rms(values):
    return math.sqrt(sum(v * v for v in values) / len(values))


class Reference:
    """ScaledAdam on flat lists of floats, transcribed from the equations."""

    def __init__(self, params, conf, clipping_update_period):
        self.c = dict(conf, clipping_update_period=clipping_update_period)
        self.p = [list(x) for x in params]
        self.delta = [[0.0] * len(x) for x in params]
        self.v = [[0.0] * len(x) for x in params]
        self.rms = [_rms(x) if len(x) > 1 else None for x in params]
        self.scale_grads = [[0.0] * conf["size_update_period"] for _ in params]
        self.scale_v = [0.0 for _ in params]
        self.t = 0
        self.norms = []
        self.threshold = None
        self.clipped = []
        self.limited = {"min": 0, "max": 0}  # size steps held by the RMS limits

    def clip_factor(self, grads):
        c, t = self.c, self.t
        if t == 0:
            return 1.0
        sumsq = 0.0
        for g, rms in zip(grads, self.rms):
            w = c["scalar_lr_scale"] if rms is None else rms
            sumsq += sum((x * w) ** 2 for x in g)
        norm = math.sqrt(sumsq)
        period = c["clipping_update_period"]
        if len(self.norms) < period:
            self.norms.append(norm)
        else:
            self.norms[t % period] = norm
        early = t in (10, 20, 40) and t < period
        if t % period == 0 or early:
            s = sorted(self.norms)
            self.threshold = c["clipping_scale"] * s[len(s) // 2] * (2.0 if early else 1.0)
        if self.threshold is not None and norm > self.threshold:
            self.clipped.append(t)
            return self.threshold / norm
        return 1.0

    def step(self, grads):
        c, t = self.c, self.t
        beta1, beta2 = c["betas"]
        factor = self.clip_factor(grads)
        for i, raw in enumerate(grads):
            g = [factor * x for x in raw]
            p = self.p[i]
            self.delta[i] = [beta1 * d for d in self.delta[i]]
            self.v[i] = [beta2 * v + (1 - beta2) * x * x for v, x in zip(self.v[i], g)]
            corr = 1 - beta2 ** (t + 1)
            direction = [x / (math.sqrt(v / corr) + c["eps"]) for x, v in zip(g, self.v[i])]
            if len(p) == 1:
                lr = c["lr"] * c["scalar_lr_scale"]
                self.delta[i] = [d - lr * (1 - beta1) * n for d, n in zip(self.delta[i], direction)]
                self.p[i] = [min(c["scalar_max"], max(-c["scalar_max"], x + d))
                             for x, d in zip(p, self.delta[i])]
                continue
            period = c["size_update_period"]
            self.scale_grads[i][t % period] = sum(x * y for x, y in zip(p, g))
            if t % period == period - 1:
                self.rms[i] = _rms(p)
                if t > 0:
                    self.size_update(i, (t + 1) // period)
            rms = min(max(self.rms[i], c["param_min_rms"]), c["param_max_rms"])
            self.delta[i] = [d - c["lr"] * (1 - beta1) * rms * n
                             for d, n in zip(self.delta[i], direction)]
            self.p[i] = [x + d for x, d in zip(self.p[i], self.delta[i])]
        self.t += 1

    def size_update(self, i, size_steps):
        c = self.c
        beta1, beta2 = c["betas"]
        bp = beta2 ** c["size_update_period"]
        sg = self.scale_grads[i]
        self.scale_v[i] = bp * self.scale_v[i] + (1 - bp) * sum(x * x for x in sg) / len(sg)
        denom = math.sqrt(self.scale_v[i] / (1 - bp ** size_steps)) + c["eps"]
        scale_step = -c["lr"] * c["scalar_lr_scale"] * sum(sg) / denom
        rms = self.rms[i]
        if rms < c["param_min_rms"] and scale_step < 0:
            scale_step = 0.0
            self.limited["min"] += 1
        if scale_step > (c["param_max_rms"] - rms) / rms:
            scale_step = (c["param_max_rms"] - rms) / rms
            self.limited["max"] += 1
        self.delta[i] = [d + (1 - beta1) * x * scale_step for d, x in zip(self.delta[i], self.p[i])]


def _params(gen):
    """A matrix, a zero bias (RMS below param_min_rms), a tensor at the RMS ceiling, a scalar."""
    return [torch.randn(3, 4, generator=gen, dtype=torch.float64),
            torch.zeros(5, dtype=torch.float64),
            torch.full((2, 3), 2.995, dtype=torch.float64),
            torch.tensor([1.99], dtype=torch.float64)]


def _grads(params, gen, rng):
    scale = rng.choice([0.2, 1.0, 1.0, 4.0, 30.0])  # uneven norms so that clipping engages
    grads = [scale * torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
    grads[2] = grads[2] * 0.1 - p_growth(params[2])  # pushes that tensor to grow
    grads[3] = grads[3] - 1.0                        # drives the scalar towards scalar_max
    return grads


def p_growth(p):
    return p.detach() * 0.5


@pytest.mark.parametrize("clipping_update_period,steps", [(3, 14), (16, 23)])
def test_step_equals_plain_python_equations(clipping_update_period, steps):
    gen = torch.Generator().manual_seed(7)
    rng = random.Random(3)
    params = [torch.nn.Parameter(p) for p in _params(gen)]
    opt = ScaledAdam(params, clipping_update_period=clipping_update_period, **CONF)
    ref = Reference([p.detach().reshape(-1).tolist() for p in params], CONF, clipping_update_period)
    for _ in range(steps):
        grads = _grads(params, gen, rng)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        ref.step([g.reshape(-1).tolist() for g in grads])
        opt.step()
        for p, expected in zip(params, ref.p):
            assert p.detach().reshape(-1).tolist() == pytest.approx(expected, rel=1e-10, abs=1e-13)
    assert len(ref.clipped) >= 2, "the case must exercise clipping"
    assert max(abs(x) for x in ref.p[3]) == pytest.approx(2.0)  # scalar_max reached
    assert ref.limited["max"] > 0 and ref.limited["min"] > 0, ref.limited


def test_update_is_relative_to_the_tensor_scale():
    """Two tensors equal up to a factor 100 (both RMS within the limits) with the same
    gradient direction move by the same relative amount (the gradient's own scale
    cancels in Adam's normalisation)."""
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(4, 4, generator=gen, dtype=torch.float64) * 0.02
    small, big = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base * 100)
    opt = ScaledAdam([small, big], clipping_scale=None, eps=1e-30)
    g = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    small.grad, big.grad = g.clone(), g * 7.0
    opt.step()
    assert torch.allclose((big - base * 100) / 100, small - base, rtol=1e-9, atol=1e-15)


def test_state_dict_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(5)
    rng = random.Random(5)
    conf = dict(CONF, clipping_update_period=3)
    a = [torch.nn.Parameter(p) for p in _params(gen)]
    opt_a = build_optimizer(a, "scaled_adam", conf)
    grads_seq = [_grads(a, gen, rng) for _ in range(12)]
    for grads in grads_seq[:7]:
        for p, g in zip(a, grads):
            p.grad = g.clone()
        opt_a.step()
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    opt_b = build_optimizer(b, "scaled_adam", conf)
    buffer = io.BytesIO()  # through a file, as a checkpoint (which must load weights_only)
    torch.save(opt_a.state_dict(), buffer)
    buffer.seek(0)
    opt_b.load_state_dict(torch.load(buffer, weights_only=True))
    for grads in grads_seq[7:]:
        for pa, pb, g in zip(a, b, grads):
            pa.grad, pb.grad = g.clone(), g.clone()
        opt_a.step()
        opt_b.step()
    for pa, pb in zip(a, b):
        assert torch.equal(pa, pb)
    assert opt_b.clip_threshold == opt_a.clip_threshold is not None


def test_tensors_at_different_update_counts_are_updated_as_if_alone():
    """The step groups tensors by update count (one foreach call per group); a tensor
    without a gradient on some updates falls behind the others and must still follow its
    own count. Without clipping, each tensor's trajectory is independent of the others."""
    gen = torch.Generator().manual_seed(11)
    conf = dict(CONF, clipping_scale=None)
    shapes = [(3, 4), (5,), (2, 3), (1,), (4,)]
    init = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
             for _ in range(9)]
    skipped = {1: {2, 5}, 3: {4}, 4: {0, 1, 2}}  # tensor -> updates without a gradient
    together = [torch.nn.Parameter(x.clone()) for x in init]
    opt = ScaledAdam(together, **conf)
    for t, step_grads in enumerate(grads):
        for i, p in enumerate(together):
            p.grad = None if t in skipped.get(i, ()) else step_grads[i].clone()
        opt.step()
    for i, x in enumerate(init):
        alone = torch.nn.Parameter(x.clone())
        opt_alone = ScaledAdam([alone], **conf)
        for t, step_grads in enumerate(grads):
            if t not in skipped.get(i, ()):
                alone.grad = step_grads[i].clone()
                opt_alone.step()
        assert torch.allclose(alone, together[i], rtol=1e-12, atol=1e-15), i


def test_parameter_groups_are_updated_as_separate_optimizers():
    """Each parameter group keeps its own flat buffers and options (lr here); without
    clipping, one optimizer over two groups equals one optimizer per group."""
    gen = torch.Generator().manual_seed(4)
    conf = dict(CONF, clipping_scale=None)
    init = [torch.randn(s, generator=gen, dtype=torch.float64) for s in ((3, 2), (4,), (5,))]
    grads = [[torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in init]
             for _ in range(6)]
    both = [torch.nn.Parameter(x.clone()) for x in init]
    opt = ScaledAdam([{"params": both[:2]}, {"params": both[2:], "lr": 0.01}], **conf)
    apart = [torch.nn.Parameter(x.clone()) for x in init]
    opts = [ScaledAdam(apart[:2], **conf), ScaledAdam(apart[2:], **dict(conf, lr=0.01))]
    for step_grads in grads:
        for p, q, g in zip(both, apart, step_grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        for o in opts:
            o.step()
    for p, q in zip(both, apart):
        assert torch.equal(p, q)
    # the state keeps one entry per tensor, shaped like it
    for p in both:
        assert opt.state[p]["delta"].shape == p.shape
        assert opt.state[p]["scale_grads"].shape == (CONF["size_update_period"],)


def test_per_tensor_factors_give_the_same_update_with_or_without_host_scalars():
    """The CPU path hands foreach a vector of factors; other devices divide the
    denominators first (foreach reads scalar vectors only from host memory)."""
    gen = torch.Generator().manual_seed(2)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    num = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    den = [torch.rand(s, generator=gen, dtype=torch.float64) + 0.5 for s in shapes]
    factors = torch.tensor([0.3, -2.0, 1e-3], dtype=torch.float64)
    base = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    want = [b + f * n / d for b, f, n, d in zip(base, factors.tolist(), num, den)]
    for host in (True, False):
        out = [b.clone() for b in base]
        add_scaled_ratio(out, num, [d.clone() for d in den], factors, host_factors=host)
        for o, w in zip(out, want):
            assert torch.allclose(o, w, rtol=1e-14, atol=0), host


def test_a_step_never_reads_device_values_on_the_host():
    """Parameters on the meta device (shapes, no data): any host read or host-only
    foreach argument in the update would raise. Clipping needs the norm on the host
    (one sync an update), so it is off here."""
    params = [torch.nn.Parameter(torch.empty(3, 4, device="meta")),
              torch.nn.Parameter(torch.empty(5, device="meta")),
              torch.nn.Parameter(torch.empty(1, device="meta"))]
    opt = ScaledAdam(params, clipping_scale=None, size_update_period=2)
    for _ in range(5):  # through two size updates
        for p in params:
            p.grad = torch.empty_like(p)
        opt.step()
    assert all(p.device.type == "meta" for p in params)
    assert opt.state[params[0]]["step"] == 5


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="scaled_adam"):
        build_optimizer([torch.nn.Parameter(torch.ones(2))], "scaled_adam", {"nope": 1})
    with pytest.raises(ValueError, match="param_min_rms"):
        ScaledAdam([torch.nn.Parameter(torch.ones(2))], param_min_rms=5.0, param_max_rms=3.0)
