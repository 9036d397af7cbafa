"""The Zipformer's small building blocks: BiasNorm, the SwooshR/SwooshL activations,
values scheduled on the batch count, and the optional activation constraints
(Balancer, Whiten) that change only gradients.

Formulas (Zipformer paper, Yao et al., ICLR 2024):

- BiasNorm(x) = x / RMS(x - b) * exp(g), with b a learnt per-channel bias and g a
  learnt scalar (log scale); the RMS is over the channel dimension.
- SwooshR(x) = log(1 + exp(x - 1)) - 0.08 x - 0.313261687
- SwooshL(x) = log(1 + exp(x - 4)) - 0.08 x - 0.035
  (both computed as max(z, 0) + log(1 + exp(-|z|)), exact for any x; in eager mode
  in place, with the gradient sigmoid(x - shift) - 0.08 recomputed in backward)

Balancer and Whiten are identities in the forward pass. In training their backward
adds a small term to the incoming gradient: the Balancer pushes each channel's share
of positive values into [min_positive, max_positive] and its RMS into
[min_abs, max_abs]; Whiten pushes the features' covariance towards a multiple of the
identity when its "whiteness" metric exceeds a limit. The encoder switches them on
with ``use_balancers``.

As in icefall, neither needs to act on every batch: a Balancer acts with a probability
that may follow a schedule (the Zipformer block: 0.5 at batch 0 down to 0.125 at batch
8000, times ``schedule_scale``), a Whiten with probability ``max_prob`` while its last
measured metric was above the limit and ``min_prob`` once it was below. The draw is on
the host (Python's ``random``, seeded with the run) so no device sync is needed; the
backward pass of a skipped call is the plain identity's.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Tuple

import torch

def _swoosh(x: torch.Tensor, shift: float, offset: float) -> torch.Tensor:
    """log(1 + exp(x - shift)) - 0.08 x - offset, written as
    max(z, 0) + log(1 + exp(-|z|)) (z = x - shift): exact to float resolution for any x
    (no overflow), and cheaper on CPU than softplus."""
    z = x - shift
    soft = torch.log(torch.exp(-z.abs()) + 1.0) + z.clamp(min=0.0)
    return soft.add(x, alpha=-0.08) - offset


class _SwooshFunction(torch.autograd.Function):
    """The same value computed in place (no temporaries kept for backward); the
    gradient sigmoid(x - shift) - 0.08 is recomputed from x."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, shift: float, offset: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.shift = shift
        z = x - shift
        soft = torch.exp(z.abs().neg_()).add_(1.0).log_().add_(z.clamp_(min=0.0))
        return soft.add_(x, alpha=-0.08).sub_(offset)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        return grad * (torch.sigmoid(x - ctx.shift) - 0.08), None, None


@torch.jit.unused
def _swoosh_eager(x: torch.Tensor, shift: float, offset: float) -> torch.Tensor:
    return _SwooshFunction.apply(x, shift, offset)


def swoosh_r(x: torch.Tensor) -> torch.Tensor:
    """SwooshR(x) = log(1 + exp(x - 1)) - 0.08 x - 0.313261687 (SwooshR(0) ~ 0)."""
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return _swoosh(x, 1.0, 0.313261687)
    return _swoosh_eager(x, 1.0, 0.313261687)


def swoosh_l(x: torch.Tensor) -> torch.Tensor:
    """SwooshL(x) = log(1 + exp(x - 4)) - 0.08 x - 0.035."""
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return _swoosh(x, 4.0, 0.035)
    return _swoosh_eager(x, 4.0, 0.035)


class SwooshR(torch.nn.Module):
    """SwooshR activation (see ``swoosh_r``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swoosh_r(x)


class SwooshL(torch.nn.Module):
    """SwooshL activation (see ``swoosh_l``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swoosh_l(x)


class BiasNorm(torch.nn.Module):
    """x / RMS(x - bias) * exp(log_scale), over the last (channel) dimension.

    Unlike LayerNorm it keeps the length information of x (the numerator is x
    itself) and has one learnt scale for all channels.
    """

    def __init__(self, num_channels: int, eps: float = 1e-8):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(num_channels))
        self.log_scale = torch.nn.Parameter(torch.zeros(()))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the per-frame factor exp(g) / RMS is formed on the (..., 1) statistics, so the
        # full-size tensor is multiplied once
        scale = ((x - self.bias) ** 2).mean(dim=-1, keepdim=True).add(self.eps).rsqrt()
        return x * (scale * self.log_scale.exp())


class ScheduledFloat:
    """A float that is piecewise linear in the training batch count.

    ``ScheduledFloat((0, 0.3), (20000, 0.1))`` is 0.3 at batch 0, 0.1 from batch
    20000 on, linear in between; ``scale`` stretches every batch count (0.1 makes
    the same schedule happen ten times sooner).
    """

    def __init__(self, *points: Tuple[float, float], scale: float = 1.0):
        if not points:
            raise ValueError("ScheduledFloat needs at least one (batch, value) point")
        xs = [float(p[0]) * scale for p in points]
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"ScheduledFloat batch counts must increase: {points}")
        self.points = [(x, float(p[1])) for x, p in zip(xs, points)]

    def __call__(self, batch_count: float) -> float:
        pts = self.points
        if batch_count <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if batch_count <= x1:
                return y0 + (y1 - y0) * (batch_count - x0) / (x1 - x0)
        return pts[-1][1]

    def __repr__(self) -> str:
        return f"ScheduledFloat({self.points})"


def scheduled(module: torch.nn.Module, name: str, schedule: ScheduledFloat) -> None:
    """Give ``module`` a float attribute ``name`` that follows ``schedule``: it starts at
    the batch-0 value and ``apply_schedules`` updates it. The forward passes read the
    plain float (TorchScript sees an ordinary attribute)."""
    table: Dict[str, ScheduledFloat] = module.__dict__.setdefault("_float_schedules", {})
    table[name] = schedule
    setattr(module, name, schedule(0.0))


def apply_schedules(model: torch.nn.Module, batch_count: float) -> None:
    """Set every scheduled float of ``model``'s modules to its value at ``batch_count``."""
    for module in model.modules():
        for name, schedule in module.__dict__.get("_float_schedules", {}).items():
            setattr(module, name, schedule(batch_count))


class _LimitParamValue(torch.autograd.Function):
    """Identity; in backward, a gradient that would move a value further outside
    [low, high] is reversed, so the optimiser brings it back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.low, ctx.high = low, high
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        wrong = ((x < ctx.low) & (grad > 0)) | ((x > ctx.high) & (grad < 0))
        return torch.where(wrong, -grad, grad), None, None


@torch.jit.unused
def limit_param_value(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``x`` unchanged, with the gradient reversal of ``_LimitParamValue``."""
    return _LimitParamValue.apply(x, low, high)


class _BalanceGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, limits: Tuple[float, float, float, float],
                grad_scale: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.limits, ctx.grad_scale = limits, grad_scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        min_pos, max_pos, min_abs, max_abs = ctx.limits
        xf = x.detach().float()
        dims = tuple(range(xf.dim() - 1))
        positive = (xf > 0).float().mean(dims)
        rms = xf.pow(2).mean(dims).sqrt()
        # the change of x each channel wants: +1 up, -1 down
        shift = (positive < min_pos).float() - (positive > max_pos).float()
        grow = (rms < min_abs).float() - (rms > max_abs).float()
        want = shift + grow * xf.sign()
        step = ctx.grad_scale * grad.detach().float().abs().mean()
        return (grad.float() - step * want).to(grad.dtype), None, None


class _GradientOnly(torch.nn.Module):
    """Identity forward; in training (when enabled, when ``x`` needs a gradient, and with
    probability ``self.prob`` (a float attribute, 1.0 by default) per call) ``x`` passes
    through ``_nudge``, an autograd function that changes only its gradient. Scripted or
    traced: the identity."""

    def __init__(self, enabled: bool):
        super().__init__()
        self.enabled = enabled
        self.prob = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting() or torch.jit.is_tracing():
            return x
        if not (self.enabled and self.training and x.requires_grad):
            return x
        return self._maybe_nudge(x)

    @torch.jit.unused
    def _maybe_nudge(self, x: torch.Tensor) -> torch.Tensor:
        prob = self.current_prob()
        if prob < 1.0 and random.random() >= prob:
            return x
        return self._nudge(x)

    @torch.jit.unused
    def current_prob(self) -> float:
        """The probability that the next training call acts."""
        return self.prob

    @torch.jit.unused
    def _nudge(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Balancer(_GradientOnly):
    """Identity forward; in training (when enabled) the gradient is nudged so that
    each channel (last dim) keeps a share of positive values in
    [min_positive, max_positive] and an RMS in [min_abs, max_abs]."""

    def __init__(self, enabled: bool, min_positive: float = 0.05, max_positive: float = 0.95,
                 min_abs: float = 0.2, max_abs: float = 100.0, grad_scale: float = 0.04,
                 prob: Optional[ScheduledFloat] = None):
        super().__init__(enabled)
        self.limits = (min_positive, max_positive, min_abs, max_abs)
        self.grad_scale = grad_scale
        if prob is not None:  # acts on a scheduled share of the calls (module docstring)
            scheduled(self, "prob", prob)

    @torch.jit.unused
    def _nudge(self, x: torch.Tensor) -> torch.Tensor:
        return _BalanceGrad.apply(x, self.limits, self.grad_scale)


def whitening_metric(x: torch.Tensor) -> torch.Tensor:
    """dim * sum(C^2) / trace(C)^2 for the covariance C of x's rows (N, dim): 1 when
    C is a multiple of the identity, up to dim when C has rank one."""
    x = x - x.mean(dim=0, keepdim=True)
    covar = x.t() @ x / x.size(0)
    return covar.pow(2).sum() * x.size(1) / (covar.diagonal().sum() ** 2 + 1e-20)


class _WhitenGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, limit: float, grad_scale: float,
                above: List[bool]) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.limit, ctx.grad_scale, ctx.above = limit, grad_scale, above
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().float().requires_grad_(True)
            metric = whitening_metric(xd.reshape(-1, xd.size(-1)))
            ctx.above[0] = float(metric.detach()) > ctx.limit
            if not ctx.above[0]:
                return grad, None, None, None
            (metric_grad,) = torch.autograd.grad(metric, xd)
        scale = ctx.grad_scale * grad.float().norm() / (metric_grad.norm() + 1e-20)
        return (grad.float() + scale * metric_grad).to(grad.dtype), None, None, None


class Whiten(_GradientOnly):
    """Identity forward; in training (when enabled), if ``whitening_metric`` of the
    features (last dim) exceeds ``limit``, the gradient gets a term (of norm
    ``grad_scale`` times its own) that lowers the metric. It acts with probability
    ``max_prob`` while the last metric it measured was above the limit (and at first),
    ``min_prob`` after one below."""

    def __init__(self, enabled: bool, limit: float = 10.0, grad_scale: float = 0.01,
                 min_prob: float = 1.0, max_prob: float = 1.0):
        super().__init__(enabled)
        self.limit = limit
        self.grad_scale = grad_scale
        self.min_prob, self.max_prob = min_prob, max_prob
        self._above = [True]  # the last measured metric was above the limit (backward)

    @torch.jit.unused
    def current_prob(self) -> float:
        return self.max_prob if self._above[0] else self.min_prob

    @torch.jit.unused
    def _nudge(self, x: torch.Tensor) -> torch.Tensor:
        return _WhitenGrad.apply(x, self.limit, self.grad_scale, self._above)


def shared_dropout(x: torch.Tensor, p: float, training: bool, shared_dim: int = -2
                   ) -> torch.Tensor:
    """Dropout whose mask is the same along ``shared_dim`` (icefall's ``Dropout3``; the
    feed-forward modules share it over time): the kept channels are scaled by 1 / (1 - p).
    One random number per (utterance, channel) instead of per element, which on a CPU is
    most of the cost of dropout on a (B, T, hidden) tensor."""
    if not training or p <= 0.0:
        return x
    shape = list(x.shape)
    shape[shared_dim] = 1
    keep = (torch.rand(shape, device=x.device) >= p).to(x.dtype) * (1.0 / (1.0 - p))
    return x * keep
