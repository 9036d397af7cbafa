"""Label-smoothed cross entropy (as KL divergence) for the attention decoder."""
from __future__ import annotations

import torch


class LabelSmoothingLoss(torch.nn.Module):
    """KL(q || softmax(x)) with q = 1 - smoothing on the target and
    smoothing / (size - 1) on every other class; padded targets are skipped.

    The sum is divided by the number of real tokens when ``normalize_length``,
    otherwise by the batch size.
    """

    def __init__(self, size: int, padding_idx: int, smoothing: float,
                 normalize_length: bool = False):
        super().__init__()
        self.criterion = torch.nn.KLDivLoss(reduction="none")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.normalize_length = normalize_length

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """x (B, L, V) logits, target (B, L) with padding_idx at padding → scalar loss."""
        if x.size(2) != self.size:
            raise ValueError(f"logits have {x.size(2)} classes, loss expects {self.size}")
        batch_size = x.size(0)
        x = x.reshape(-1, self.size)
        if x.dtype != torch.float64:  # at least float32 log_softmax, also under autocast
            x = x.float()
        target = target.reshape(-1)
        true_dist = torch.full_like(x, self.smoothing / (self.size - 1))
        ignore = target == self.padding_idx
        total = int(target.size(0) - ignore.sum())
        target = target.masked_fill(ignore, 0)
        true_dist.scatter_(1, target.unsqueeze(1), self.confidence)
        kl = self.criterion(torch.log_softmax(x, dim=1), true_dist)
        denom = total if self.normalize_length else batch_size
        return kl.masked_fill(ignore.unsqueeze(1), 0.0).sum() / max(denom, 1)
