"""The U2/U2++ model: shared encoder, CTC head and attention decoder(s), trained on its losses."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from wenet.transformer.ctc import CTC
from wenet.transformer.encoder import check_decoding_chunk_size
from wenet.transformer.losses import Loss, LossInputs, combine
from wenet.utils.common import IGNORE_ID


class ASRModel(torch.nn.Module):
    """Encoder with a CTC head and an attention decoder (U2/U2++), trained on its losses.

    ``losses`` (wenet/transformer/losses.py, built from the config by
    wenet/models/losses.py) are kept by name in ``model.losses``; ``forward`` returns
    ``loss = sum of weight * value`` over them with each loss's outputs. The usual
    hybrid: ``attention`` of weight 1 - ctc_weight and ``ctc`` of weight ctc_weight
    (``cr_ctc`` adds CR-CTC). sos = eos = vocab_size - 1 (the last unit, ``<sos/eos>``).
    """

    # training only: TorchScript (the runtimes' model) carries neither the losses nor forward
    __jit_ignored_attributes__ = ["losses"]
    __jit_unused_properties__ = ["reverse_weight"]

    def __init__(self, vocab_size: int, encoder: torch.nn.Module, decoder: torch.nn.Module,
                 ctc: CTC, losses: Optional[Dict[str, Loss]] = None,
                 ignore_id: int = IGNORE_ID):
        super().__init__()
        self.sos = vocab_size - 1
        self.eos = vocab_size - 1
        self.vocab_size = vocab_size
        self.ignore_id = ignore_id
        self.encoder = encoder
        self.decoder = decoder
        self.ctc = ctc
        self.set_losses(losses or {})

    @torch.jit.unused
    def set_losses(self, losses: Dict[str, Loss]) -> None:
        """Train on ``losses`` (by name, in the order they are summed); each checks the
        model has what it needs and may add a head of its own."""
        self.losses = torch.nn.ModuleDict(losses)
        for loss in self.losses.values():
            loss.attach(self)

    @property
    def reverse_weight(self) -> float:
        """The right-to-left weight the attention loss trains with (0.0 without one): the
        default weight of the right-to-left decoder in rescoring (the ONNX export's)."""
        att = self.losses["attention"] if "attention" in self.losses else None
        return float(getattr(att, "reverse_weight", 0.0))

    @torch.jit.unused
    def set_training_step(self, step: int) -> None:
        """The number of updates made so far (the training loop's; losses with a warm-up,
        as the pruned transducer loss, follow it)."""
        for loss in self.losses.values():
            loss.set_training_step(int(step))

    @torch.jit.unused  # training only; runtimes call the exported methods below
    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
                text: torch.Tensor, text_lengths: torch.Tensor
                ) -> Dict[str, Optional[torch.Tensor]]:
        """speech (B, T, D), speech_lengths (B,), text (B, L) padded with ignore_id, text_lengths (B,).

        Returns ``loss`` and the outputs of every loss (``loss_att``, ``th_accuracy``,
        ``loss_ctc``, ``loss_cr``...); those of a loss that is not computed (weight 0,
        CR-CTC in eval) are None.
        """
        if text_lengths.dim() != 1 or not (
                speech.size(0) == speech_lengths.size(0) == text.size(0)
                == text_lengths.size(0)):
            raise ValueError(f"batch sizes differ: speech {speech.shape}, speech_lengths "
                             f"{speech_lengths.shape}, text {text.shape}, "
                             f"text_lengths {text_lengths.shape}")
        batch = (speech, speech_lengths, text, text_lengths)
        for loss in self.losses.values():
            if loss.active:
                batch = loss.views(batch)
        encoder_out, encoder_mask = self.encoder(batch[0], batch[1])
        inputs = LossInputs(self, encoder_out, encoder_mask, encoder_mask.squeeze(1).sum(1),
                            batch[2], batch[3])
        return combine(self.losses.values(), inputs)

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
    def is_streaming(self) -> bool:
        """Whether the encoder was trained to run chunk by chunk (a U2/U2++ encoder with
        ``static_chunk_size`` or ``use_dynamic_chunk``, a causal Zipformer), so that its
        chunked output is what it learnt: what the streaming server asks."""
        return self.encoder.is_streaming()

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
