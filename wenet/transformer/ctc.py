"""CTC head: a linear projection of the encoder output to the vocabulary, and its loss."""
from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn.functional as F

from wenet.utils.mask import make_non_pad_mask


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
        return self.loss(self.frame_log_probs(hs_pad), hlens, ys_pad, ys_lens)

    def frame_log_probs(self, hs_pad: torch.Tensor) -> torch.Tensor:
        """(B, T, D) → log-probabilities (T, B, V) in at least float32 (bf16/fp16 autocast
        leaves log_softmax in low precision; a float64 model keeps float64)."""
        ys_hat = self.ctc_lo(hs_pad).transpose(0, 1)
        if ys_hat.dtype != torch.float64:
            ys_hat = ys_hat.float()
        return ys_hat.log_softmax(2)

    def loss(self, log_probs: torch.Tensor, hlens: torch.Tensor, ys_pad: torch.Tensor,
             ys_lens: torch.Tensor, log_prior: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The CTC loss of ``log_probs`` (T, B, V), summed and divided by the batch size.

        ``log_prior`` (V,), already scaled: every path is scored by ``sum_t log p(y_t) -
        log_prior[y_t]`` (label priors, Huang et al., ICASSP 2024: a path with fewer blanks
        gains, so the posteriors get less peaky). Those scores are not normalised per
        frame, which torch's CTC gradient assumes, so the loss is taken on the normalised
        scores and the per-frame normaliser added back: ``-log sum_paths exp(score) =
        ctc(log_softmax(score)) - sum_t logsumexp(score_t)``.
        """
        possible = hlens >= self.min_frames(ys_pad, ys_lens)
        if not torch.jit.is_scripting():
            impossible = int((~possible).sum())
            if impossible > 0:
                _warn_impossible(impossible, int(hlens.size(0)))
        if log_prior is None:
            return self.ctc_loss(log_probs, ys_pad, hlens, ys_lens) / log_probs.size(1)
        scores = log_probs - log_prior.to(log_probs.dtype)
        per_utt = F.ctc_loss(scores.log_softmax(2), ys_pad, hlens, ys_lens, reduction="none",
                             zero_infinity=True)
        valid = make_non_pad_mask(hlens, scores.size(0)).t()  # (T, B)
        log_norm = (scores.logsumexp(2) * valid).sum(0)  # (B,)
        # an impossible utterance (zero_infinity) contributes nothing, as without priors
        per_utt = torch.where(possible, per_utt - log_norm, per_utt)
        return per_utt.sum() / log_probs.size(1)

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

