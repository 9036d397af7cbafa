"""Global mean/variance normalisation inside the encoder, so models carry their statistics."""
from __future__ import annotations

import torch


class GlobalCMVN(torch.nn.Module):
    """(x - mean) * istd per feature dimension; ``mean``/``istd`` are (D,) buffers."""

    def __init__(self, mean: torch.Tensor, istd: torch.Tensor, norm_var: bool = True):
        super().__init__()
        if mean.shape != istd.shape:
            raise ValueError(f"CMVN mean {tuple(mean.shape)} and istd {tuple(istd.shape)} differ")
        self.norm_var = norm_var
        self.register_buffer("mean", mean)
        self.register_buffer("istd", istd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) → normalised (B, T, D)."""
        x = x - self.mean
        if self.norm_var:
            x = x * self.istd
        return x
