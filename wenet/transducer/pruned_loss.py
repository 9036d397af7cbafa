"""Pruned RNN-T loss (Kuang et al. 2022, "Pruned RNN-T for fast, memory-efficient ASR
training") in plain PyTorch, CPU and GPU, no k2.

The full transducer loss evaluates the joint network on every lattice node, a
(B, T, U+1, V) tensor.  The pruned loss does it in three steps:

1. **Simple loss** (:func:`simple_rnnt_loss`).  Separate linear projections of the
   encoder frames (``am``, (B, T, V)) and of the predictor outputs (``lm``,
   (B, U+1, V)) are combined by addition, ``log_softmax(am[t] + lm[u])``.  Its
   normaliser factorises, ``log sum_v exp(am[t, v]) exp(lm[u, v])`` is a (T, V) x
   (V, U+1) matrix product, so the lattice costs O(B T U V) time but only
   O(B T U) memory.  ``lm_scale`` and ``am_scale`` smooth it: each transition's
   log-probability is ``(1 - lm_scale - am_scale) * joint + lm_scale * lm_only +
   am_scale * am_only``, where ``lm_only`` is ``log_softmax(lm[u])`` and
   ``am_only`` is ``am[t]`` renormalised under the unigram distribution (the
   mean of ``softmax(lm)`` over the batch's label positions).  The loss is then
   ``-log`` of the sum over alignments of the exponentiated path scores.
2. **Pruning bounds** (:func:`pruning_bounds`).  The simple loss's gradient with
   respect to each transition's log-probability is its posterior occupation.
   For every frame t the window ``[s_t, s_t + prune_range)`` of label positions
   is chosen that holds the most "leaving the frame" mass (blank and big-blank
   occupation) minus the label mass entering the window from below.  The window
   starts are then made valid: ``s_0 = 0``; non-decreasing in t; steps of at
   most ``prune_range - 1`` (so a path can continue from one window into the next);
   the last frame's window holds U (the final blank leaves from (T-1, U)); all
   inside ``[0, max(U + 1 - prune_range, 0)]`` of the utterance.
3. **Pruned loss** (:func:`pruned_rnnt_loss`).  The real joint network runs only
   inside the windows, (B, T, prune_range, V); its log-probabilities are placed on
   the (B, T+1, U+1) lattice, -inf outside the windows, and the usual recursion
   (wenet/transducer/rnnt_loss.py) gives the loss.  With ``prune_range >= U + 1``
   the window is the whole column and the pruned loss *is* the full loss.

Multi-blank (big blanks of several frames) and FastEmit (label-emission
gradients times ``1 + fastemit_lambda``) are defined on the lattice and apply to
both losses here.  An utterance with more labels than ``(prune_range - 1) * T``
has no path inside its windows: its pruned loss is inf.
"""
from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import torch

from wenet.transducer.rnnt_loss import NEG_INF, lattice_grids, occupancies


class _LatticeLoss(torch.autograd.Function):
    """``-log P`` per utterance of transition grids (B, T+1, U+1); the gradient with
    respect to each grid is minus its occupation (labels times ``label_scale``).

    Also returns the occupations, (B, T, U+1): leaving-the-frame mass (blank plus
    big blanks) and label mass, as non-differentiable outputs for the pruning bounds.
    """

    @staticmethod
    def forward(ctx, logit_lengths, target_lengths, durations, label_scale, blank, label, *big):
        log_p, occ_blank, occ_label, occ_big = occupancies(
            blank.detach().double(), label.detach().double(), [b.detach().double() for b in big],
            durations, logit_lengths, target_lengths)
        ctx.save_for_backward(occ_blank, occ_label, *occ_big)
        ctx.label_scale = label_scale
        ctx.dtype = blank.dtype
        leave = occ_blank + sum(occ_big, torch.zeros_like(occ_blank))
        occ_out = (leave.to(blank.dtype), occ_label.to(blank.dtype))
        ctx.mark_non_differentiable(*occ_out)
        return (-log_p).to(blank.dtype), occ_out[0], occ_out[1]

    @staticmethod
    def backward(ctx, grad_cost, _grad_leave, _grad_label):
        occ_blank, occ_label, *occ_big = ctx.saved_tensors
        g = grad_cost.double().view(-1, 1, 1)

        def grid(occ: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            row = torch.zeros_like(occ[:, :1])  # nothing leaves row T
            return torch.cat([-scale * occ * g, row], 1).to(ctx.dtype)

        return (None, None, None, None, grid(occ_blank), grid(occ_label, ctx.label_scale),
                *[grid(o) for o in occ_big])


def lattice_loss(blank: torch.Tensor, label: torch.Tensor, big: Sequence[torch.Tensor],
                 durations: Sequence[int], logit_lengths: torch.Tensor,
                 target_lengths: torch.Tensor, fastemit_lambda: float = 0.0
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Costs (B,) of :func:`~wenet.transducer.rnnt_loss.lattice_grids` grids, and the
    (detached) occupations (leaving-the-frame, label), each (B, T, U+1)."""
    return _LatticeLoss.apply(logit_lengths, target_lengths, tuple(durations),
                              1.0 + float(fastemit_lambda), blank, label, *big)


def _reduce(costs: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return costs.mean()
    if reduction == "sum":
        return costs.sum()
    if reduction == "none":
        return costs
    raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")


def _simple_node_logprobs(am: torch.Tensor, lm: torch.Tensor, targets: torch.Tensor,
                          target_lengths: torch.Tensor, ids: Sequence[int], lm_scale: float,
                          am_scale: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Smoothed log-probs of the blank-like outputs ``ids`` (each (B, T, U+1)) and of the
    labels (B, T, U) on the factorised joint ``am[t] + lm[u]``."""
    B, U1, V = lm.shape
    U = U1 - 1
    am_max = am.detach().amax(-1, keepdim=True)  # (B, T, 1)
    lm_max = lm.detach().amax(-1, keepdim=True)  # (B, U+1, 1)
    am_p, lm_p = (am - am_max).exp(), (lm - lm_max).exp()
    # log sum_v exp(am[t, v] + lm[u, v]), (B, T, U+1)
    joint_norm = (am_p @ lm_p.transpose(1, 2)).clamp(min=1e-30).log() + am_max \
        + lm_max.transpose(1, 2)
    lm_norm = lm_p.sum(-1).log() + lm_max.squeeze(-1)  # (B, U+1)
    valid = (torch.arange(U1, device=lm.device).view(1, U1) <= target_lengths.view(B, 1))
    lm_soft = lm_p / lm_p.sum(-1, keepdim=True)
    unigram = (lm_soft * valid.unsqueeze(-1)).sum((0, 1)) / valid.sum().clamp(min=1)
    log_unigram = unigram.clamp(min=1e-30).log()  # (V,)
    am_norm = (am_p @ unigram).clamp(min=1e-30).log() + am_max.squeeze(-1)  # (B, T)
    w_joint = 1.0 - lm_scale - am_scale

    def mix(am_v, lm_v, uni_v):  # am_v (B, T, 1|U), lm_v (B, 1, U+1|U), uni_v broadcast
        out = w_joint * (am_v + lm_v - joint_norm[..., :lm_v.size(-1)])
        if lm_scale:
            out = out + lm_scale * (lm_v - lm_norm[:, :lm_v.size(-1)].unsqueeze(1))
        if am_scale:
            out = out + am_scale * (am_v + uni_v - am_norm.unsqueeze(-1))
        return out

    blanks = [mix(am[..., i:i + 1], lm[..., i].unsqueeze(1), log_unigram[i]) for i in ids]
    tgt = targets[:, :U].long().clamp(min=0)
    am_y = am.gather(2, tgt.unsqueeze(1).expand(B, am.size(1), U))  # (B, T, U)
    lm_y = lm[:, :U].gather(2, tgt.unsqueeze(-1)).transpose(1, 2)  # (B, 1, U)
    return blanks, mix(am_y, lm_y, log_unigram[tgt].unsqueeze(1))


def simple_rnnt_loss(am: torch.Tensor, lm: torch.Tensor, targets: torch.Tensor,
                     logit_lengths: torch.Tensor, target_lengths: torch.Tensor, blank: int = 0,
                     lm_scale: float = 0.0, am_scale: float = 0.0,
                     big_blank_ids: Sequence[int] = (), big_blank_durations: Sequence[int] = (),
                     fastemit_lambda: float = 0.0, reduction: str = "mean"
                     ) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The simple (smoothed) loss of ``am`` (B, T, V') and ``lm`` (B, U+1, V') logits.

    Returns the reduced loss and the occupations (leaving-the-frame, label), each
    (B, T, U+1), that :func:`pruning_bounds` takes.  ``lm_scale = am_scale = 0``
    is the transducer loss of the joint ``log_softmax(am[t] + lm[u])``.
    """
    if not 0.0 <= lm_scale + am_scale <= 1.0 or lm_scale < 0 or am_scale < 0:
        raise ValueError(f"lm_scale {lm_scale} and am_scale {am_scale} must be >= 0 with a "
                         "sum <= 1")
    ids = [blank] + list(big_blank_ids)
    node_blanks, label = _simple_node_logprobs(am, lm, targets, target_lengths, ids,
                                               lm_scale, am_scale)
    logit_lengths = logit_lengths.long().to(am.device)
    target_lengths = target_lengths.long().to(am.device)
    grids = lattice_grids(node_blanks[0], label, node_blanks[1:], big_blank_durations,
                          logit_lengths, target_lengths)
    costs, leave, occ_label = lattice_loss(grids[0], grids[1], grids[2], big_blank_durations,
                                           logit_lengths, target_lengths, fastemit_lambda)
    return _reduce(costs, reduction), (leave, occ_label)


def _reverse_cummin(x: torch.Tensor) -> torch.Tensor:
    """y[t] = min(x[t:]) along dim 1."""
    return torch.flip(torch.cummin(torch.flip(x, [1]), 1).values, [1])


def pruning_bounds(leave: torch.Tensor, label: torch.Tensor, logit_lengths: torch.Tensor,
                   target_lengths: torch.Tensor, prune_range: int) -> torch.Tensor:
    """Window starts s (B, T) from the simple loss's occupations (module docstring, step 2).

    ``leave`` and ``label`` are (B, T, U+1); frame t of utterance b keeps label
    positions ``s[b, t] .. s[b, t] + R - 1`` with ``R = min(prune_range, U + 1)``.
    """
    if prune_range < 2:
        raise ValueError(f"prune_range must be >= 2 (one label and the blank), got {prune_range}")
    B, T, U1 = leave.shape
    R = min(prune_range, U1)
    device = leave.device
    zero = torch.zeros_like(leave[..., :1])
    csum = torch.cat([zero, leave.cumsum(-1)], -1)  # csum[u] = sum of leave[:u]
    in_window = csum[..., R:] - csum[..., :U1 - R + 1]  # (B, T, U1-R+1): start s
    entering = torch.cat([zero, label[..., :U1 - R]], -1)  # label from s-1 into s
    start = (in_window - entering).argmax(-1)
    hi = (target_lengths.to(device).long() + 1 - R).clamp(min=0).view(B, 1)
    t = torch.arange(T, device=device).view(1, T)
    last = (logit_lengths.to(device).long() - 1).view(B, 1)
    start = torch.where(t >= last, hi, torch.minimum(start, hi))
    start = _reverse_cummin(start)  # non-decreasing
    slack = (R - 1) * t - start  # steps of at most R-1 <=> slack non-decreasing
    slack = _reverse_cummin(slack).clamp(min=0)  # and s_0 = 0
    return (R - 1) * t - slack


def pruned_rnnt_loss(joint: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     enc_proj: torch.Tensor, pred_proj: torch.Tensor, targets: torch.Tensor,
                     starts: torch.Tensor, prune_range: int, logit_lengths: torch.Tensor,
                     target_lengths: torch.Tensor, blank: int = 0,
                     big_blank_ids: Sequence[int] = (), big_blank_durations: Sequence[int] = (),
                     fastemit_lambda: float = 0.0, reduction: str = "mean") -> torch.Tensor:
    """Transducer loss with the joint evaluated inside the windows only.

    ``joint(enc (B, T, R, J), pred (B, T, R, J)) -> logits (B, T, R, V')``;
    ``enc_proj`` (B, T, J) and ``pred_proj`` (B, U+1, J) are the joint's projected
    inputs, ``starts`` (B, T) come from :func:`pruning_bounds`.
    """
    B, T, J = enc_proj.shape
    U1 = pred_proj.size(1)
    R = min(prune_range, U1)
    u = starts.unsqueeze(-1) + torch.arange(R, device=starts.device)  # (B, T, R)
    pred = pred_proj.gather(1, u.view(B, T * R, 1).expand(B, T * R, J)).view(B, T, R, J)
    logits = joint(enc_proj.unsqueeze(2), pred)
    if logits.dtype in (torch.float16, torch.bfloat16):  # the lattice wants float32
        logits = logits.float()
    lp = torch.log_softmax(logits, dim=-1)
    y = torch.cat([targets[:, :U1 - 1].long().clamp(min=0),
                   torch.full_like(targets[:, :1], blank).long()], 1)  # (B, U+1)
    label_ids = y.gather(1, u.view(B, T * R)).view(B, T, R, 1)
    grid = torch.full((B, T, U1), NEG_INF, dtype=lp.dtype, device=lp.device)

    def place(values: torch.Tensor) -> torch.Tensor:  # (B, T, R) -> (B, T, U+1)
        return grid.scatter(2, u, values)

    blank_g = place(lp[..., blank])
    label_g = place(lp.gather(3, label_ids).squeeze(3))[..., :U1 - 1]
    big_g = [place(lp[..., i]) for i in big_blank_ids]
    logit_lengths = logit_lengths.long().to(lp.device)
    target_lengths = target_lengths.long().to(lp.device)
    grids = lattice_grids(blank_g, label_g, big_g, big_blank_durations, logit_lengths,
                          target_lengths)
    costs, _, _ = lattice_loss(grids[0], grids[1], grids[2], big_blank_durations,
                               logit_lengths, target_lengths, fastemit_lambda)
    return _reduce(costs, reduction)


def warmup_scales(step: int, simple_loss_scale: float, warmup_steps: int
                  ) -> Tuple[float, float]:
    """(simple, pruned) loss weights at training update ``step``.

    The pruned loss is only as good as the windows the simple loss chooses, so
    early in training the simple loss dominates: its weight falls linearly from 1
    to ``simple_loss_scale`` over ``warmup_steps`` updates while the pruned loss's
    rises from 0.1 to 1 (icefall's schedule); afterwards they stay there.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return simple_loss_scale, 1.0
    frac = step / warmup_steps
    return 1.0 - frac * (1.0 - simple_loss_scale), 0.1 + 0.9 * frac
