"""ScaledAdam (Zipformer paper, ICLR 2024; icefall's ``optim.py``), written from its equations.

Per parameter tensor ``p`` with gradient ``g`` at update ``t`` (0-based), with
``c`` the clipping factor of this update (below):

* Adam-style second moment with bias correction:
  ``v <- beta2 * v + (1 - beta2) * (c g)^2``,
  ``n = c g / (sqrt(v / (1 - beta2^(t+1))) + eps)``.
* The update is proportional to the tensor's RMS: the change is
  ``-lr * clamp(rms(p), param_min_rms, param_max_rms) * n``, so every tensor moves by the same
  *relative* amount whatever its scale (``rms(p)`` is refreshed every
  ``size_update_period`` updates).
* A learnt scale: the gradient of the loss w.r.t. a log-scale ``s`` of ``p``
  (``p = exp(s) * p'``) is ``sum(p * g)``. Those are collected over
  ``size_update_period`` updates and, at the end of each period, an Adam-like step on
  ``s`` (lr ``lr * scalar_lr_scale``, second moment decayed by ``beta2^period``)
  multiplies ``p`` by ``1 + step``; the step never shrinks a tensor whose RMS is below
  ``param_min_rms`` nor grows it past ``param_max_rms``.
* Momentum on the update itself: ``delta <- beta1 * delta + (1 - beta1) * (changes)``,
  ``p <- p + delta`` (no first-moment bias correction: slower first updates, as icefall).
* Tensors with a single element are updated by plain Adam with
  ``lr * scalar_lr_scale`` and kept within ``[-scalar_max, scalar_max]``.

Gradient clipping from the recent median: each update's norm is
``sqrt(sum over tensors of |g * rms(p)|^2 + sum over scalars of (g * scalar_lr_scale)^2)``
(the size of the update it would cause, not of the raw gradient). The norms of the
last ``clipping_update_period`` updates are kept; every ``clipping_update_period``
updates (and early, at updates 10, 20 and 40 when those come before the first period
ends, with a doubled threshold) the threshold becomes ``clipping_scale`` x their
median. An update whose norm exceeds the threshold has its gradients scaled down to
it (``c = threshold / norm``); before the first threshold, and at update 0, there is
no clipping. The executor leaves clipping to this optimizer (``clips_gradients``).

The update runs on groups of tensors rather than one tensor at a time: tensors with
the same update count (all of them, normally) and kind (scalar or not) go through one
``torch._foreach_*`` call per operation, and the per-tensor quantities (RMS, the
log-scale statistics, the update factors) are vectors over the group. icefall batches
tensors of equal shape instead; on a CPU the ~270 small tensors of the main job's
Zipformer made the per-tensor loop cost 26 ms a step.

Simplifications against icefall: one model-wide clipping norm over all parameter groups
(threshold from the first group's ``clipping_scale``), the median is
``sorted(norms)[n // 2]``, and the second moment is always bias-corrected.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

EARLY_CLIPPING_ESTIMATES = (10, 20, 40)


class ScaledAdam(torch.optim.Optimizer):
    """See the module docstring. ``clips_gradients`` tells the training loop not to clip too."""

    clips_gradients = True

    def __init__(self, params: Iterable, lr: float = 0.045, betas: Tuple[float, float] = (0.9, 0.98),
                 scalar_lr_scale: float = 0.1, eps: float = 1.0e-8,
                 param_min_rms: float = 1.0e-5, param_max_rms: float = 3.0,
                 scalar_max: float = 10.0, size_update_period: int = 4,
                 clipping_scale: Optional[float] = 2.0, clipping_update_period: int = 100) -> None:
        if lr <= 0 or not 0.0 <= betas[0] < 1.0 or not 0.0 < betas[1] < 1.0:
            raise ValueError(f"scaled_adam: bad lr {lr} or betas {betas}")
        if not 0 < param_min_rms < param_max_rms or size_update_period < 1 \
                or clipping_update_period < 1:
            raise ValueError("scaled_adam: need 0 < param_min_rms < param_max_rms, "
                             "size_update_period >= 1, clipping_update_period >= 1")
        defaults = dict(lr=lr, betas=tuple(betas), scalar_lr_scale=scalar_lr_scale, eps=eps,
                        param_min_rms=param_min_rms, param_max_rms=param_max_rms,
                        scalar_max=scalar_max, size_update_period=size_update_period,
                        clipping_scale=clipping_scale,
                        clipping_update_period=clipping_update_period)
        super().__init__(params, defaults)
        self.clip_step = 0                 # updates seen by the clipping statistics
        self.clip_norms: List[float] = []  # ring buffer of recent norms
        self.clip_threshold: Optional[float] = None
        self.num_clipped = 0               # since the last threshold estimate

    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, Any]:
        sd = super().state_dict()
        sd["clipping"] = {"step": self.clip_step, "norms": list(self.clip_norms),
                          "threshold": self.clip_threshold, "num_clipped": self.num_clipped}
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        clipping = state_dict.pop("clipping", None)
        super().load_state_dict(state_dict)
        if clipping is not None:
            self.clip_step = int(clipping["step"])
            self.clip_norms = [float(x) for x in clipping["norms"]]
            self.clip_threshold = (None if clipping["threshold"] is None
                                   else float(clipping["threshold"]))
            self.num_clipped = int(clipping["num_clipped"])

    def _init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["delta"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
            if p.numel() > 1:
                state["param_rms"] = _rms(p)
                state["scale_grads"] = torch.zeros(group["size_update_period"], dtype=p.dtype,
                                                   device=p.device)
                state["scale_exp_avg_sq"] = torch.zeros((), dtype=p.dtype, device=p.device)
        return state

    # --------------------------------------------------------------- clipping
    def _update_norm(self) -> float:
        """This update's norm, measured as the step it would cause (see the module docstring)."""
        grads: List[torch.Tensor] = []
        weights: List[torch.Tensor] = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._init_state(p, group)
                grads.append(p.grad)
                weights.append(state["param_rms"] if p.numel() > 1 else
                               torch.full((), group["scalar_lr_scale"], dtype=p.grad.dtype,
                                          device=p.grad.device))
        if not grads:
            return 0.0
        norms = torch.stack(torch._foreach_norm(grads)).double()
        # one host sync for the whole model, not one per tensor
        return math.sqrt(float((norms * torch.stack(weights).double()).pow(2).sum()))

    def _clipping_factor(self) -> float:
        """Factor <= 1 for this update's gradients; updates the recent-norm statistics."""
        group = self.param_groups[0]
        clipping_scale, period = group["clipping_scale"], group["clipping_update_period"]
        step = self.clip_step
        self.clip_step += 1
        if clipping_scale is None or step == 0:
            return 1.0
        norm = self._update_norm()
        if not math.isfinite(norm):
            return 1.0  # the training loop skips such updates; keep them out of the median
        if len(self.clip_norms) < period:
            self.clip_norms.append(norm)
        else:
            self.clip_norms[step % period] = norm
        early = step in EARLY_CLIPPING_ESTIMATES and step < period
        if step % period == 0 or early:
            recent = sorted(self.clip_norms)
            median = recent[len(recent) // 2]
            self.clip_threshold = clipping_scale * median * (2.0 if early else 1.0)
            logging.info("scaled_adam: update %d: grad-norm quartiles %s, threshold %.3e, "
                         "%d of the last %d updates clipped", step,
                         " ".join(f"{recent[min(len(recent) - 1, len(recent) * q // 4)]:.3e}"
                                  for q in range(5)),
                         self.clip_threshold, self.num_clipped, len(recent))
            self.num_clipped = 0
        if self.clip_threshold is None or norm <= self.clip_threshold:
            return 1.0
        self.num_clipped += 1
        factor = self.clip_threshold / norm
        if factor < 0.1:
            logging.warning("scaled_adam: update %d: gradient norm %.3e is %.1fx the "
                            "threshold", step, norm, 1.0 / factor)
        return factor

    # ------------------------------------------------------------------ steps
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        clip = self._clipping_factor()
        for group in self.param_groups:
            # tensors of one kind (scalar or not) and one update count share every constant
            # of the update, so each bucket is updated by one foreach call per operation
            buckets: Dict[Tuple[bool, int], List[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("scaled_adam does not support sparse gradients")
                state = self._init_state(p, group)
                buckets.setdefault((p.numel() == 1, state["step"]), []).append(p)
            for (scalar, step), params in buckets.items():
                states = [self.state[p] for p in params]
                grads = [p.grad for p in params]
                if clip != 1.0:
                    grads = torch._foreach_mul(grads, clip)
                torch._foreach_mul_([s["delta"] for s in states], group["betas"][0])
                if scalar:
                    self._step_scalars(group, params, grads, states, step)
                else:
                    self._step_tensors(group, params, grads, states, step)
                for state in states:
                    state["step"] += 1
        return loss

    @staticmethod
    def _adam_denominators(group: Dict[str, Any], grads: List[torch.Tensor],
                           states: List[Dict[str, Any]], step: int
                           ) -> Tuple[List[torch.Tensor], float]:
        """After updating the second moments v: (sqrt(v) + eps * sqrt(c), sqrt(c)) with c
        the bias correction, so that grad / (sqrt(v / c) + eps) = grad * sqrt(c) / denom
        (two passes over the moments instead of three)."""
        beta2 = group["betas"][1]
        exp_avg_sq = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        root_c = math.sqrt(1 - beta2 ** (step + 1))
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denom, group["eps"] * root_c)
        return denom, root_c

    def _step_scalars(self, group: Dict[str, Any], params: List[torch.Tensor],
                      grads: List[torch.Tensor], states: List[Dict[str, Any]],
                      step: int) -> None:
        lr = group["lr"] * group["scalar_lr_scale"]
        deltas = [s["delta"] for s in states]
        denom, root_c = self._adam_denominators(group, grads, states, step)
        torch._foreach_addcdiv_(deltas, grads, denom, value=-lr * (1 - group["betas"][0]) * root_c)
        torch._foreach_add_(params, deltas)
        torch._foreach_clamp_min_(params, -group["scalar_max"])
        torch._foreach_clamp_max_(params, group["scalar_max"])

    def _step_tensors(self, group: Dict[str, Any], params: List[torch.Tensor],
                      grads: List[torch.Tensor], states: List[Dict[str, Any]],
                      step: int) -> None:
        beta1 = group["betas"][0]
        period = group["size_update_period"]
        dots = torch.stack([torch.sum(x) for x in torch._foreach_mul(params, grads)])
        torch._foreach_copy_([s["scale_grads"][step % period] for s in states],
                             list(dots.unbind(0)))
        if step % period == period - 1:
            rms = torch.stack(torch._foreach_norm(params)) / torch.tensor(
                [math.sqrt(p.numel()) for p in params], dtype=dots.dtype, device=dots.device)
            torch._foreach_copy_([s["param_rms"] for s in states], list(rms.unbind(0)))
            if step > 0:
                self._size_update(group, params, states, rms, step)
        else:
            rms = torch.stack([s["param_rms"] for s in states])
        deltas = [s["delta"] for s in states]
        denom, root_c = self._adam_denominators(group, grads, states, step)
        factors = rms.clamp(group["param_min_rms"], group["param_max_rms"]) * (
            -group["lr"] * (1 - beta1) * root_c)
        add_scaled_ratio(deltas, grads, denom, factors)
        torch._foreach_add_(params, deltas)

    @staticmethod
    def _size_update(group: Dict[str, Any], params: List[torch.Tensor],
                     states: List[Dict[str, Any]], rms: torch.Tensor, step: int) -> None:
        """Adam-like step on each tensor's log-scale from the last period's ``sum(p * g)``."""
        beta1, beta2 = group["betas"]
        period = group["size_update_period"]
        beta2_period = beta2 ** period
        scale_grads = torch.stack([s["scale_grads"] for s in states])  # (N, period)
        moment = torch.stack([s["scale_exp_avg_sq"] for s in states])
        moment = moment * beta2_period + scale_grads.pow(2).mean(dim=1) * (1 - beta2_period)
        torch._foreach_copy_([s["scale_exp_avg_sq"] for s in states], list(moment.unbind(0)))
        size_steps = (step + 1) // period
        denom = (moment / (1 - beta2_period ** size_steps)).sqrt() + group["eps"]
        scale_step = -group["lr"] * group["scalar_lr_scale"] * scale_grads.sum(dim=1) / denom
        scale_step = torch.where(rms < group["param_min_rms"], scale_step.clamp(min=0.0),
                                 scale_step)  # never shrink a tensor already below the floor
        scale_step = torch.minimum(scale_step, (group["param_max_rms"] - rms) / rms)
        changes = torch._foreach_mul(params, list((scale_step * (1 - beta1)).unbind(0)))
        torch._foreach_add_([s["delta"] for s in states], changes)


def add_scaled_ratio(out: List[torch.Tensor], num: List[torch.Tensor], den: List[torch.Tensor],
                     factors: torch.Tensor, host_factors: Optional[bool] = None) -> None:
    """out[i] += factors[i] * num[i] / den[i] for every tensor i (``den`` may be changed).
    foreach reads a vector of scalars only from host memory, so a CPU tensor of factors
    goes in one pass; on another device (or with ``host_factors`` False) the factors
    divide ``den`` first, which needs no copy to the host and no sync."""
    if host_factors is None:
        host_factors = factors.device.type == "cpu"
    if host_factors:
        torch._foreach_addcdiv_(out, num, den, factors)
    else:
        torch._foreach_div_(den, list(factors.unbind(0)))
        torch._foreach_addcdiv_(out, num, den)


def _rms(p: torch.Tensor) -> torch.Tensor:
    return p.detach().pow(2).mean().sqrt()
