"""Our RNN-T loss, in plain PyTorch (CPU and GPU): standard and multi-blank, with FastEmit
and gradient clamping.

Lattice.  For an utterance with ``T`` frames and ``U`` labels, node ``(t, u)``
(0 <= t <= T, 0 <= u <= U) means "t frames consumed, u labels emitted".  From
``(t, u)`` with ``t < T``:

* a label ``y_{u+1}`` goes to ``(t, u + 1)`` (needs ``u < U``);
* the blank goes to ``(t + 1, u)``;
* a big blank of duration ``d`` (multi-blank, Xu et al. 2022) goes to ``(t + d, u)``,
  only when ``t + d <= T``.

Every path starts at ``(0, 0)`` and ends at ``(T, U)``: the last transition is
a blank or a big blank that lands EXACTLY on frame T.  This is the paper's
termination convention (its final probability sums the standard blank at
``(T-1, U)`` and each big blank at ``(T-d, U)``); a big blank that would run
past the last frame is not a valid path.  ``loss = -log P(y | x)``, the log-sum
over all paths of the sum of the transitions' log-probabilities (the
log-softmax of the joint's logits at the node where the transition starts).

Computation.  alpha (forward) and beta (backward) are computed on
anti-diagonals ``n = t + u``: every transition goes from a diagonal to a later
one, so each diagonal is one vectorised step over the batch and u.  The
gradient is explicit (the alpha/beta occupation formula, as warp-transducer and
torchaudio), which keeps memory at one (B, T, U+1, V) tensor and lets FastEmit
and clamping act on it.  The recursions run in float64 on the small (B, T+1,
U+1) lattice, so float32 inputs keep float32 precision even for long utterances.

* FastEmit (Yu et al. 2021): the gradient with respect to the log-probability
  of every label emission is scaled by ``1 + fastemit_lambda`` (blanks
  unchanged), then chained through the log-softmax.  The loss value is unchanged.
* ``clamp > 0`` clamps the gradient with respect to the logits to [-clamp, clamp]
  (as torchaudio's ``clamp``).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

NEG_INF = float("-inf")


def _skew(x: torch.Tensor, num_diag: int) -> torch.Tensor:
    """(B, T+1, U+1) grid -> (B, num_diag, U+1) with [b, n, u] = x[b, n - u, u]; -inf off-grid."""
    B, T1, U1 = x.shape
    n = torch.arange(num_diag, device=x.device).unsqueeze(1)
    t = n - torch.arange(U1, device=x.device).unsqueeze(0)  # (N, U+1)
    valid = (t >= 0) & (t < T1)
    index = t.clamp(0, T1 - 1).unsqueeze(0).expand(B, num_diag, U1)
    return x.gather(1, index).masked_fill(~valid.unsqueeze(0), NEG_INF)


def _unskew(x: torch.Tensor, T1: int) -> torch.Tensor:
    """(B, N, U+1) diagonal layout -> (B, T1, U+1) grid with [b, t, u] = x[b, t + u, u]."""
    B, N, U1 = x.shape
    index = (torch.arange(T1, device=x.device).unsqueeze(1)
             + torch.arange(U1, device=x.device).unsqueeze(0))
    return x.gather(1, index.unsqueeze(0).expand(B, T1, U1))


def _shift(x: torch.Tensor, offset: int) -> torch.Tensor:
    """Along the last dim: offset 1 -> y[u] = x[u-1]; offset -1 -> y[u] = x[u+1]; -inf filled."""
    fill = torch.full_like(x[..., :1], NEG_INF)
    if offset == 1:
        return torch.cat([fill, x[..., :-1]], dim=-1)
    return torch.cat([x[..., 1:], fill], dim=-1)


def transition_logprobs(log_probs: torch.Tensor, targets: torch.Tensor, logit_lengths: torch.Tensor,
                        target_lengths: torch.Tensor, blank: int, big_blank_ids: Sequence[int],
                        durations: Sequence[int]
                        ) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """Log-probabilities of the lattice transitions, on a (B, T+1, U+1) grid.

    Returns (blank, label, [big blank per duration]); invalid transitions
    (past an utterance's frames or labels, big blanks overshooting T) are -inf.
    """
    B, T, U1, V = log_probs.shape
    U = U1 - 1
    tgt = targets[:, :U].long().clamp(min=0)
    label_lp = log_probs[:, :, :U, :].gather(
        3, tgt.view(B, 1, U, 1).expand(B, T, U, 1)).squeeze(3)
    return lattice_grids(log_probs[..., blank], label_lp,
                         [log_probs[..., i] for i in big_blank_ids], durations,
                         logit_lengths, target_lengths)


def lattice_grids(blank_lp: torch.Tensor, label_lp: torch.Tensor, big_lp: Sequence[torch.Tensor],
                  durations: Sequence[int], logit_lengths: torch.Tensor,
                  target_lengths: torch.Tensor
                  ) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """Per-node transition log-probs -> the (B, T+1, U+1) grids the recursion runs on.

    ``blank_lp`` and each of ``big_lp`` are (B, T, U+1) (the transition leaving node
    (t, u)), ``label_lp`` (B, T, U) (label y_{u+1} leaving (t, u)).  Transitions past
    an utterance's frames or labels, and big blanks overshooting its last frame,
    become -inf; row T and column U of the label grid are -inf (nothing leaves them).
    """
    B, T, U1 = blank_lp.shape
    U = U1 - 1
    device = blank_lp.device
    t = torch.arange(T, device=device).view(1, T, 1)
    frames = logit_lengths.view(B, 1, 1)
    in_frames = t < frames  # (B, T, 1)
    blank_lp = blank_lp.masked_fill(~in_frames, NEG_INF)
    in_labels = torch.arange(U, device=device).view(1, 1, U) < target_lengths.view(B, 1, 1)
    label_lp = label_lp.masked_fill(~(in_frames & in_labels), NEG_INF)
    # the label leaving node u sits in column u; nothing leaves column U
    label_lp = torch.cat([label_lp, torch.full_like(blank_lp[..., :1], NEG_INF)], dim=-1)
    big = [b.masked_fill(~(t + d <= frames), NEG_INF) for b, d in zip(big_lp, durations)]
    row = torch.full_like(blank_lp[:, :1], NEG_INF)  # row t = T: nothing leaves it
    return (torch.cat([blank_lp, row], 1), torch.cat([label_lp, row], 1),
            [torch.cat([b, row], 1) for b in big])


def _alpha_beta(blank: torch.Tensor, label: torch.Tensor, big: List[torch.Tensor],
                durations: Sequence[int], logit_lengths: torch.Tensor,
                target_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward and backward log-variables on the (B, T+1, U+1) grid, and log P per utterance."""
    B, T1, U1 = blank.shape
    N = T1 + U1 - 1
    bl, lab = _skew(blank, N), _skew(label, N)
    bigs = [_skew(b, N) for b in big]
    alpha = torch.full((B, N, U1), NEG_INF, dtype=blank.dtype, device=blank.device)
    alpha[:, 0, 0] = 0.0
    for n in range(1, N):
        prev = alpha[:, n - 1]
        terms = [prev + bl[:, n - 1], _shift(prev + lab[:, n - 1], 1)]
        for d, bb in zip(durations, bigs):
            if n - d >= 0:
                terms.append(alpha[:, n - d] + bb[:, n - d])
        alpha[:, n] = torch.logsumexp(torch.stack(terms), dim=0)
    max_d = max([1] + list(durations))
    beta = torch.full((B, N + max_d, U1), NEG_INF, dtype=blank.dtype, device=blank.device)
    final = torch.zeros(B, N, U1, dtype=torch.bool, device=blank.device)
    rows = torch.arange(B, device=blank.device)
    final[rows, logit_lengths + target_lengths, target_lengths] = True
    for n in range(N - 1, -1, -1):
        nxt = beta[:, n + 1]
        terms = [nxt + bl[:, n], _shift(nxt, -1) + lab[:, n]]
        for d, bb in zip(durations, bigs):
            terms.append(beta[:, n + d] + bb[:, n])
        beta[:, n] = torch.logsumexp(torch.stack(terms), dim=0).masked_fill(final[:, n], 0.0)
    log_p = alpha[rows, logit_lengths + target_lengths, target_lengths]
    return _unskew(alpha, T1), _unskew(beta[:, :N], T1), log_p


def occupancies(blank: torch.Tensor, label: torch.Tensor, big: List[torch.Tensor],
                durations: Sequence[int], logit_lengths: torch.Tensor,
                target_lengths: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """``log P`` (B,) and the posterior occupation of every transition, (B, T, U+1) each.

    Inputs are the float64 grids of :func:`lattice_grids`.  The occupation of a
    transition is the probability mass of the paths through it divided by P, which
    is also d log P / d (its log-probability): (blank, label, [big blank per duration]).
    Unreachable transitions, and every transition of an utterance with P = 0, get 0.
    """
    alpha, beta, log_p = _alpha_beta(blank, label, big, durations, logit_lengths, target_lengths)
    T = blank.size(1) - 1
    base = alpha[:, :T] - log_p.view(-1, 1, 1)
    base = base.masked_fill(~torch.isfinite(log_p).view(-1, 1, 1), NEG_INF)
    occ_blank = torch.exp(base + blank[:, :T] + beta[:, 1:])
    occ_label = torch.exp(base + label[:, :T] + _shift(beta[:, :T], -1))
    occ_big = []
    for d, bb in zip(durations, big):
        ahead = torch.cat([beta[:, d:], torch.full_like(beta[:, :d], NEG_INF)], 1)[:, :T]
        occ_big.append(torch.exp(base + bb[:, :T] + ahead))
    return log_p, occ_blank, occ_label, occ_big


class _RNNTLoss(torch.autograd.Function):
    """Costs (B,) in forward; the gradient wrt the logits is computed there and saved."""

    @staticmethod
    def forward(ctx, logits, targets, logit_lengths, target_lengths, blank, fastemit_lambda,
                clamp, fused_log_softmax, big_blank_ids, durations):
        x = logits.detach()
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        lp = torch.log_softmax(x, dim=-1) if fused_log_softmax else x
        blank_lp, label_lp, big_lp = transition_logprobs(
            lp, targets, logit_lengths, target_lengths, blank, big_blank_ids, durations)
        # The lattice is small (B, T+1, U+1): float64 there keeps long utterances exact
        # to float32 precision in the gradient (alpha, beta ~ -1000 lose digits in float32).
        blank_lp, label_lp = blank_lp.double(), label_lp.double()
        big_lp = [b.double() for b in big_lp]
        log_p, occ_blank, occ_label, occ_big = occupancies(
            blank_lp, label_lp, big_lp, durations, logit_lengths, target_lengths)
        T = logits.size(1)
        occ_blank, occ_label = occ_blank.to(lp.dtype), occ_label.to(lp.dtype)
        occ_big = [o.to(lp.dtype) for o in occ_big]
        scale = 1.0 + fastemit_lambda
        if fused_log_softmax:
            node = occ_blank + scale * occ_label + sum(occ_big, torch.zeros_like(occ_blank))
            grad = (lp if lp is not x else lp.clone()).exp_().mul_(node.unsqueeze(-1))
        else:
            grad = torch.zeros_like(x)
        grad[..., blank] -= occ_blank
        U = logits.size(2) - 1
        if U > 0:
            tgt = targets[:, :U].long().clamp(min=0)
            index = tgt.view(-1, 1, U, 1).expand(-1, T, U, 1)
            grad[:, :, :U].scatter_add_(3, index, -scale * occ_label[..., :U].unsqueeze(-1))
        for i, occ in zip(big_blank_ids, occ_big):
            grad[..., i] -= occ
        if clamp > 0:
            grad.clamp_(-clamp, clamp)
        ctx.save_for_backward(grad.to(logits.dtype))
        return -log_p.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return (grad * grad_out.view(-1, 1, 1, 1), None, None, None, None, None, None, None,
                None, None)


def rnnt_loss(logits: torch.Tensor, targets: torch.Tensor, logit_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int = 0, reduction: str = "mean",
              fastemit_lambda: float = 0.0, clamp: float = -1.0,
              fused_log_softmax: bool = True, big_blank_ids: Sequence[int] = (),
              big_blank_durations: Sequence[int] = ()) -> torch.Tensor:
    """RNN-T loss ``-log P(y|x)`` per utterance, reduced (``mean`` | ``sum`` | ``none``).

    Same arguments as ``torchaudio.functional.rnnt_loss`` (logits (B, T, U+1, V),
    targets (B, U) with any padding, lengths (B,)) plus ``fastemit_lambda`` and the
    multi-blank outputs: ``big_blank_ids[i]`` is a blank that advances
    ``big_blank_durations[i]`` frames.  ``fused_log_softmax=False`` takes
    ``logits`` as log-probabilities and returns the gradient with respect to them.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")
    if len(big_blank_ids) != len(big_blank_durations):
        raise ValueError("big_blank_ids and big_blank_durations differ in length")
    if any(d < 2 for d in big_blank_durations):
        raise ValueError(f"big blank durations must be >= 2, got {list(big_blank_durations)}")
    if logits.dim() != 4 or targets.size(1) != logits.size(2) - 1:
        raise ValueError(f"logits {tuple(logits.shape)} must be (B, T, U+1, V) for targets "
                         f"{tuple(targets.shape)}")
    logit_lengths = logit_lengths.long().to(logits.device)
    target_lengths = target_lengths.long().to(logits.device)
    costs = _RNNTLoss.apply(logits, targets.to(logits.device), logit_lengths, target_lengths,
                            blank, float(fastemit_lambda), float(clamp), fused_log_softmax,
                            tuple(big_blank_ids), tuple(big_blank_durations))
    if reduction == "mean":
        return costs.mean()
    if reduction == "sum":
        return costs.sum()
    return costs
