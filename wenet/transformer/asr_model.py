"""The U2/U2++ model: shared encoder, CTC head and attention decoder(s), hybrid loss."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from wenet.transformer.cr_ctc import consistency_loss, two_views
from wenet.transformer.ctc import CTC
from wenet.transformer.encoder import check_decoding_chunk_size
from wenet.transformer.label_smoothing_loss import LabelSmoothingLoss
from wenet.utils.common import IGNORE_ID, add_sos_eos, reverse_pad_list, th_accuracy


class ASRModel(torch.nn.Module):
    """Hybrid CTC/attention model.

    loss = ctc_weight * loss_ctc + (1 - ctc_weight) * loss_att, where
    loss_att = (1 - reverse_weight) * left-to-right + reverse_weight * right-to-left.
    sos = eos = vocab_size - 1 (the last unit, ``<sos/eos>``).

    With ``cr_ctc`` (training only; wenet/transformer/cr_ctc.py) every batch is seen in
    two independently time-masked views (``time_mask_ratio``): loss_ctc and loss_att are
    the averages over both views, and ``cr_loss_scale * loss_cr`` (the consistency of the
    two views' CTC posteriors) is added. CV and decoding see the batch once, unmasked.
    """

    def __init__(self, vocab_size: int, encoder: torch.nn.Module, decoder: torch.nn.Module,
                 ctc: CTC, ctc_weight: float = 0.5, ignore_id: int = IGNORE_ID,
                 reverse_weight: float = 0.0, lsm_weight: float = 0.0,
                 length_normalized_loss: bool = False, cr_ctc: bool = False,
                 cr_loss_scale: float = 0.2, time_mask_ratio: float = 2.5):
        super().__init__()
        if not 0.0 <= ctc_weight <= 1.0:
            raise ValueError(f"ctc_weight must be in [0, 1], got {ctc_weight}")
        if not 0.0 <= reverse_weight <= 1.0:
            raise ValueError(f"reverse_weight must be in [0, 1], got {reverse_weight}")
        if reverse_weight > 0.0 and not hasattr(decoder, "right_decoder"):
            raise ValueError("reverse_weight > 0 needs the bitransformer decoder")
        if cr_ctc and (ctc_weight == 0.0 or cr_loss_scale < 0 or time_mask_ratio < 0):
            raise ValueError("cr_ctc needs ctc_weight > 0, cr_loss_scale >= 0 and "
                             f"time_mask_ratio >= 0 (got {ctc_weight}, {cr_loss_scale}, "
                             f"{time_mask_ratio})")
        self.sos = vocab_size - 1
        self.eos = vocab_size - 1
        self.vocab_size = vocab_size
        self.ignore_id = ignore_id
        self.ctc_weight = ctc_weight
        self.reverse_weight = reverse_weight
        self.cr_ctc = bool(cr_ctc)
        self.cr_loss_scale = float(cr_loss_scale)
        self.time_mask_ratio = float(time_mask_ratio)
        self.encoder = encoder
        self.decoder = decoder
        self.ctc = ctc
        self.criterion_att = LabelSmoothingLoss(vocab_size, ignore_id, lsm_weight,
                                                length_normalized_loss)

    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
                text: torch.Tensor, text_lengths: torch.Tensor
                ) -> Dict[str, Optional[torch.Tensor]]:
        """speech (B, T, D), speech_lengths (B,), text (B, L) padded with ignore_id, text_lengths (B,).

        Returns {loss, loss_att, loss_ctc, loss_cr, th_accuracy}; a term whose weight is
        0 is not computed and is None (th_accuracy goes with loss_att; loss_cr is None
        unless CR-CTC is training).
        """
        if text_lengths.dim() != 1 or not (
                speech.size(0) == speech_lengths.size(0) == text.size(0)
                == text_lengths.size(0)):
            raise ValueError(f"batch sizes differ: speech {speech.shape}, speech_lengths "
                             f"{speech_lengths.shape}, text {text.shape}, "
                             f"text_lengths {text_lengths.shape}")
        # training only: TorchScript (runtimes) compiles neither branch of CR-CTC
        two = self.cr_ctc and self.training
        if not torch.jit.is_scripting() and two:
            speech, speech_lengths, text, text_lengths = two_views(
                speech, speech_lengths, text, text_lengths, self.time_mask_ratio)
        encoder_out, encoder_mask = self.encoder(speech, speech_lengths)
        encoder_out_lens = encoder_mask.squeeze(1).sum(1)

        loss_att: Optional[torch.Tensor] = None
        acc_att: Optional[torch.Tensor] = None
        if self.ctc_weight != 1.0:
            loss_att, acc = self._calc_att_loss(encoder_out, encoder_mask, text, text_lengths)
            acc_att = torch.tensor(acc)
        loss_ctc: Optional[torch.Tensor] = None
        if self.ctc_weight != 0.0:
            loss_ctc = self.ctc(encoder_out, encoder_out_lens, text, text_lengths)
        loss_cr: Optional[torch.Tensor] = None
        if not torch.jit.is_scripting() and two:
            loss_cr = consistency_loss(self.ctc.log_softmax(encoder_out), encoder_out_lens)
        return {"loss": self._total_loss(loss_ctc, loss_att, loss_cr), "loss_att": loss_att,
                "loss_ctc": loss_ctc, "loss_cr": loss_cr, "th_accuracy": acc_att}

    def _total_loss(self, loss_ctc: Optional[torch.Tensor], loss_att: Optional[torch.Tensor],
                    loss_cr: Optional[torch.Tensor]) -> torch.Tensor:
        if loss_ctc is None:
            assert loss_att is not None
            loss = loss_att
        elif loss_att is None:
            loss = loss_ctc
        else:
            loss = self.ctc_weight * loss_ctc + (1 - self.ctc_weight) * loss_att
        if loss_cr is not None:
            loss = loss + self.cr_loss_scale * loss_cr
        return loss

    def _calc_att_loss(self, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                       ys_pad: torch.Tensor, ys_pad_lens: torch.Tensor
                       ) -> Tuple[torch.Tensor, float]:
        """Teacher-forced decoder loss (both directions mixed) and left-to-right accuracy."""
        ys_in_pad, ys_out_pad = add_sos_eos(ys_pad, self.sos, self.eos, self.ignore_id)
        ys_in_lens = ys_pad_lens + 1
        r_ys_pad = reverse_pad_list(ys_pad, ys_pad_lens, float(self.ignore_id))
        r_ys_in_pad, r_ys_out_pad = add_sos_eos(r_ys_pad, self.sos, self.eos, self.ignore_id)
        decoder_out, r_decoder_out, _ = self.decoder(encoder_out, encoder_mask, ys_in_pad,
                                                     ys_in_lens, r_ys_in_pad,
                                                     self.reverse_weight)
        loss_att = self.criterion_att(decoder_out, ys_out_pad)
        if self.reverse_weight > 0.0:
            r_loss_att = self.criterion_att(r_decoder_out, r_ys_out_pad)
            loss_att = loss_att * (1 - self.reverse_weight) + r_loss_att * self.reverse_weight
        acc_att = th_accuracy(decoder_out.view(-1, self.vocab_size), ys_out_pad,
                              ignore_label=self.ignore_id)
        return loss_att, acc_att

    def encode(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
               decoding_chunk_size: int = -1, num_decoding_left_chunks: int = -1,
               simulate_streaming: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encoder output (B, T', D) and mask (B, 1, T') for decoding.

        ``decoding_chunk_size`` -1: full context; > 0: that chunk size (with
        ``num_decoding_left_chunks``); anything else is a ValueError naming it (0 would
        draw a random chunk size, as training does). ``simulate_streaming`` runs the
        chunk-by-chunk path with caches instead of a chunk mask (batch size 1 only).
        """
        check_decoding_chunk_size(decoding_chunk_size)
        if simulate_streaming and decoding_chunk_size > 0:
            return self.encoder.forward_chunk_by_chunk(speech, decoding_chunk_size,
                                                       num_decoding_left_chunks)
        return self.encoder(speech, speech_lengths, decoding_chunk_size,
                            num_decoding_left_chunks)

    def ctc_logprobs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """CTC log-probabilities (B, T', V) of an encoder output."""
        return self.ctc.log_softmax(encoder_out)

    # ---- methods WeNet 2.x runtimes call by name on the TorchScript model ----

    @torch.jit.export
    def subsampling_rate(self) -> int:
        """Input frames per encoder output frame."""
        return self.encoder.embed.subsampling_rate

    @torch.jit.export
    def right_context(self) -> int:
        """Extra input frames the subsampling looks ahead."""
        return self.encoder.embed.right_context

    @torch.jit.export
    def sos_symbol(self) -> int:
        """Start-of-sentence id."""
        return self.sos

    @torch.jit.export
    def eos_symbol(self) -> int:
        """End-of-sentence id."""
        return self.eos

    @torch.jit.export
    def forward_encoder_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                              att_cache: torch.Tensor = torch.zeros(0, 0, 0, 0),
                              cnn_cache: torch.Tensor = torch.zeros(0, 0, 0, 0)
                              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Streaming encoder step; see BaseEncoder.forward_chunk."""
        return self.encoder.forward_chunk(xs, offset, required_cache_size, att_cache, cnn_cache)

    @torch.jit.export
    def ctc_activation(self, xs: torch.Tensor) -> torch.Tensor:
        """CTC log-probabilities of an encoder output chunk."""
        return self.ctc.log_softmax(xs)

    @torch.jit.export
    def is_bidirectional_decoder(self) -> bool:
        """Whether the decoder has a right-to-left branch (U2++)."""
        return hasattr(self.decoder, "right_decoder")

    @torch.jit.export
    def forward_attention_decoder(self, hyps: torch.Tensor, hyps_lens: torch.Tensor,
                                  encoder_out: torch.Tensor, reverse_weight: float = 0.0
                                  ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Score N hypotheses of one utterance with the decoder(s), for rescoring.

        hyps (N, L) = sos + tokens, padded (any id); hyps_lens (N,) counting sos;
        encoder_out (1, T, D). Returns log-probabilities (N, L, V) of the
        left-to-right decoder and of the right-to-left one (whose input is sos
        + the reversed tokens, padded with eos); the latter is
        log_softmax(tensor(0.)) when reverse_weight is 0 or there is none.
        """
        if encoder_out.size(0) != 1:
            raise ValueError("forward_attention_decoder scores hypotheses of one utterance")
        num_hyps = hyps.size(0)
        if hyps_lens.size(0) != num_hyps:
            raise ValueError("hyps and hyps_lens disagree on the number of hypotheses")
        encoder_out = encoder_out.repeat(num_hyps, 1, 1)
        encoder_mask = torch.ones(num_hyps, 1, encoder_out.size(1), dtype=torch.bool,
                                  device=encoder_out.device)
        r_hyps_lens = hyps_lens - 1
        r_hyps = hyps[:, 1:]
        # reverse the first r_hyps_lens[i] tokens of each row, eos after them
        index_range = torch.arange(0, r_hyps.size(1), device=encoder_out.device)
        seq_len_expand = r_hyps_lens.unsqueeze(1)
        seq_mask = seq_len_expand > index_range
        index = ((seq_len_expand - 1) - index_range) * seq_mask
        r_hyps = torch.gather(r_hyps, 1, index)
        r_hyps = torch.where(seq_mask, r_hyps, self.eos)
        r_hyps = torch.cat([hyps[:, 0:1], r_hyps], dim=1)
        decoder_out, r_decoder_out, _ = self.decoder(encoder_out, encoder_mask, hyps,
                                                     hyps_lens, r_hyps, reverse_weight)
        decoder_out = torch.nn.functional.log_softmax(decoder_out, dim=-1)
        r_decoder_out = torch.nn.functional.log_softmax(r_decoder_out, dim=-1)
        return decoder_out, r_decoder_out
