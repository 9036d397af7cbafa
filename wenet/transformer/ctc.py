"""CTC head: a linear projection of the encoder output to the vocabulary, and its loss."""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F


@torch.jit.unused
def _warn_impossible(count: int, batch: int) -> None:
    logging.warning("CTC: %d of %d utterances have fewer encoder frames than their "
                    "labels need; their loss is set to 0 (check filter_conf)", count, batch)


class CTC(torch.nn.Module):
    """ctc_lo: Linear(encoder_output_size, odim). Blank is id 0."""

    def __init__(self, odim: int, encoder_output_size: int):
        super().__init__()
        self.ctc_lo = torch.nn.Linear(encoder_output_size, odim)
        # zero_infinity keeps impossible alignments from poisoning the batch;
        # forward counts and reports them so they are never silent.
        self.ctc_loss = torch.nn.CTCLoss(reduction="sum", zero_infinity=True)

    def forward(self, hs_pad: torch.Tensor, hlens: torch.Tensor, ys_pad: torch.Tensor,
                ys_lens: torch.Tensor) -> torch.Tensor:
        """hs_pad (B, T, D), hlens (B,), ys_pad (B, L) padded with -1, ys_lens (B,).

        Returns the summed loss divided by the batch size (as WeNet).
        """
        ys_hat = self.ctc_lo(hs_pad)
        # at least float32 (bf16/fp16 autocast leaves log_softmax in low precision; a
        # float64 model keeps float64)
        ys_hat = ys_hat.transpose(0, 1)
        if ys_hat.dtype != torch.float64:
            ys_hat = ys_hat.float()
        ys_hat = ys_hat.log_softmax(2)  # (T, B, V)
        if not torch.jit.is_scripting():
            impossible = int((hlens < self.min_frames(ys_pad, ys_lens)).sum())
            if impossible > 0:
                _warn_impossible(impossible, int(hlens.size(0)))
        loss = self.ctc_loss(ys_hat, ys_pad, hlens, ys_lens)
        return loss / ys_hat.size(1)

    @staticmethod
    def min_frames(ys_pad: torch.Tensor, ys_lens: torch.Tensor) -> torch.Tensor:
        """Fewest frames a CTC path for each target needs: its length plus one
        blank between every pair of equal neighbours."""
        if ys_pad.size(1) < 2:
            return ys_lens
        same = ys_pad[:, 1:] == ys_pad[:, :-1]
        inside = torch.arange(1, ys_pad.size(1), device=ys_pad.device).unsqueeze(0) \
            < ys_lens.unsqueeze(1)
        return ys_lens + (same & inside).sum(1)

    def log_softmax(self, hs_pad: torch.Tensor) -> torch.Tensor:
        """(B, T, D) → CTC log-probabilities (B, T, V)."""
        return F.log_softmax(self.ctc_lo(hs_pad), dim=2)

