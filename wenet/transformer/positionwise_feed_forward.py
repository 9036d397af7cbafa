"""Position-wise feed-forward block of Transformer/Conformer layers."""
from __future__ import annotations

import torch


class PositionwiseFeedForward(torch.nn.Module):
    """w_2(dropout(activation(w_1(x)))), applied to every frame independently."""

    def __init__(self, idim: int, hidden_units: int, dropout_rate: float,
                 activation: torch.nn.Module = torch.nn.ReLU()):
        super().__init__()
        self.w_1 = torch.nn.Linear(idim, hidden_units)
        self.activation = activation
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.w_2 = torch.nn.Linear(hidden_units, idim)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        """(B, T, idim) → (B, T, idim)."""
        return self.w_2(self.dropout(self.activation(self.w_1(xs))))
