"""Joint network: combines an encoder frame and a predictor output into output logits."""
from __future__ import annotations

import torch

from wenet.utils.common import get_activation


class TransducerJoint(torch.nn.Module):
    """``out(act(enc_proj(e) + pred_proj(p)))``.

    The projections are separate methods so a search projects each encoder
    frame and each predictor output once and then only runs ``forward`` on
    the sums (the expensive part over the vocabulary).  ``output_size`` is the
    vocabulary plus any big blanks of a multi-blank model.
    """

    def __init__(self, output_size: int, enc_output_size: int, pred_output_size: int,
                 join_dim: int = 256, activation: str = "tanh"):
        super().__init__()
        self.enc_proj = torch.nn.Linear(enc_output_size, join_dim)
        self.pred_proj = torch.nn.Linear(pred_output_size, join_dim)
        self.activation = get_activation(activation)
        self.out = torch.nn.Linear(join_dim, output_size)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """(..., enc_dim) -> (..., join_dim)."""
        return self.enc_proj(enc)

    def project_predictor(self, pred: torch.Tensor) -> torch.Tensor:
        """(..., pred_dim) -> (..., join_dim)."""
        return self.pred_proj(pred)

    def forward(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        """Logits of projected inputs; shapes broadcast, e.g. (B, T, 1, J) + (B, 1, U+1, J)
        -> (B, T, U+1, V) for training, (N, J) + (N, J) -> (N, V) for a search step."""
        return self.out(self.activation(enc_proj + pred_proj))
