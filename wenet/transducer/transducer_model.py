"""Transducer (RNN-T) model on the shared encoders, optionally with CTC and attention heads.

``loss = transducer_weight * loss_rnnt + ctc_weight * loss_ctc + attention_weight * loss_att``
(each loss averaged over the utterances of the batch).  A head whose weight is 0
is not built.  Output units: the vocabulary (blank 0, sos/eos last, as the other
models) followed by the big blanks of a multi-blank model
(``big_blank_durations``; id ``vocab_size + i`` advances ``durations[i]`` frames).

``transducer_loss``: ``full`` evaluates the joint on the whole lattice; ``pruned``
(wenet/transducer/pruned_loss.py) adds the simple projections ``simple_am_proj`` /
``simple_lm_proj`` and trains on ``s * loss_simple + p * loss_pruned``, with (s, p)
moving from (1, 0.1) to (``simple_loss_scale``, 1) over ``prune_warmup_steps``
updates (the training loop tells the model its update count, ``set_training_step``).
"""

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torchaudio.functional as taf

from wenet.transducer.joint import TransducerJoint
from wenet.transducer.pruned_loss import (pruned_rnnt_loss, pruning_bounds, simple_rnnt_loss,
                                          warmup_scales)
from wenet.transducer.rnnt_loss import rnnt_loss
from wenet.transformer.asr_model import ASRModel
from wenet.transformer.ctc import CTC
from wenet.utils.common import IGNORE_ID


class _MissingCTC(torch.nn.Module):
    """Placeholder for a CTC head that was not built (TorchScript needs a typed module)."""

    def log_softmax(self, hs_pad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this transducer model has no CTC head (ctc_weight was 0)")


class _MissingDecoder(torch.nn.Module):
    """Placeholder for an attention decoder that was not built."""

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in_pad: torch.Tensor,
                ys_in_lens: torch.Tensor, r_ys_in_pad: torch.Tensor = torch.empty(0),
                reverse_weight: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise RuntimeError("this transducer model has no attention decoder "
                           "(attention_weight was 0)")


class TransducerModel(ASRModel):
    """Encoder + prediction network + joint network (+ optional CTC / attention heads).

    The decoding interface (used by the transducer searches in wenet/decode/ and exported for
    runtimes): ``project_encoder``, ``predictor_init_state``,
    ``forward_predictor_step``, ``forward_joint_step``, ``blank_symbol``,
    ``big_blank_ids``, ``big_blank_durations``.
    """

    durations: List[int]  # annotated for TorchScript (may be empty)
    big_ids: List[int]

    def __init__(self, vocab_size: int, encoder: torch.nn.Module, predictor: torch.nn.Module,
                 joint: TransducerJoint, ctc: Optional[CTC] = None,
                 decoder: Optional[torch.nn.Module] = None, transducer_weight: float = 1.0,
                 ctc_weight: float = 0.0, attention_weight: float = 0.0,
                 ignore_id: int = IGNORE_ID, reverse_weight: float = 0.0,
                 lsm_weight: float = 0.0, length_normalized_loss: bool = False,
                 rnnt_loss_impl: str = "ours", fastemit_lambda: float = 0.0,
                 rnnt_clamp: float = -1.0, big_blank_durations: Sequence[int] = (),
                 transducer_loss: str = "full", prune_range: int = 5, lm_scale: float = 0.25,
                 am_scale: float = 0.0, simple_loss_scale: float = 0.5,
                 prune_warmup_steps: int = 2000):
        _check_pruned_options(transducer_loss, rnnt_loss_impl, rnnt_clamp, prune_range,
                              lm_scale, am_scale, simple_loss_scale)
        if transducer_weight <= 0.0:
            raise ValueError(f"transducer_weight must be > 0, got {transducer_weight}")
        if rnnt_loss_impl not in ("ours", "torchaudio"):
            raise ValueError(f"rnnt_loss_impl must be 'ours' or 'torchaudio', got {rnnt_loss_impl!r}")
        if rnnt_loss_impl == "torchaudio" and (fastemit_lambda > 0 or big_blank_durations):
            raise ValueError("torchaudio's rnnt_loss has no FastEmit or multi-blank: use "
                             "rnnt_loss_impl: ours")
        if (ctc_weight > 0) != (ctc is not None):
            raise ValueError("a CTC head is needed exactly when ctc_weight > 0")
        if (attention_weight > 0) != (decoder is not None):
            raise ValueError("an attention decoder is needed exactly when attention_weight > 0")
        super().__init__(vocab_size, encoder, decoder if decoder is not None else _MissingDecoder(),
                         ctc if ctc is not None else _MissingCTC(), ctc_weight=ctc_weight,
                         ignore_id=ignore_id, reverse_weight=reverse_weight,
                         lsm_weight=lsm_weight, length_normalized_loss=length_normalized_loss)
        self.predictor = predictor
        self.joint = joint
        self.blank = 0
        self.transducer_weight = transducer_weight
        self.attention_weight = attention_weight
        self.rnnt_loss_impl = rnnt_loss_impl
        self.fastemit_lambda = fastemit_lambda
        self.rnnt_clamp = rnnt_clamp
        self.durations: List[int] = [int(d) for d in big_blank_durations]
        self.big_ids: List[int] = [vocab_size + i for i in range(len(self.durations))]
        self.transducer_loss = transducer_loss
        self.prune_range = prune_range
        self.lm_scale = lm_scale
        self.am_scale = am_scale
        self.simple_loss_scale = simple_loss_scale
        self.prune_warmup_steps = prune_warmup_steps
        self.training_step = 0
        if transducer_loss == "pruned":  # the simple loss's own projections to the outputs
            outputs = joint.out.out_features
            self.simple_am_proj = torch.nn.Linear(encoder.output_size(), outputs)
            self.simple_lm_proj = torch.nn.Linear(predictor.output_size(), outputs)

    @torch.jit.unused
    def set_training_step(self, step: int) -> None:
        """The number of updates made so far (the pruned loss's warm-up follows it)."""
        self.training_step = int(step)

    @torch.jit.unused  # training only; runtimes use the exported step methods
    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
                text: torch.Tensor, text_lengths: torch.Tensor
                ) -> Dict[str, Optional[torch.Tensor]]:
        """Same inputs and dict as ASRModel.forward, plus ``loss_rnnt``."""
        encoder_out, encoder_mask = self.encoder(speech, speech_lengths)
        encoder_out_lens = encoder_mask.squeeze(1).sum(1)
        parts: Dict[str, Optional[torch.Tensor]] = {}
        if self.transducer_loss == "pruned":
            loss_rnnt, parts = self._calc_pruned_loss(encoder_out, encoder_out_lens, text,
                                                      text_lengths)
        else:
            loss_rnnt = self._calc_rnnt_loss(encoder_out, encoder_out_lens, text, text_lengths)
        loss = self.transducer_weight * loss_rnnt
        loss_ctc: Optional[torch.Tensor] = None
        if self.ctc_weight > 0:
            loss_ctc = self.ctc(encoder_out, encoder_out_lens, text, text_lengths)
            loss = loss + self.ctc_weight * loss_ctc
        loss_att: Optional[torch.Tensor] = None
        acc_att: Optional[torch.Tensor] = None
        if self.attention_weight > 0:
            loss_att, acc = self._calc_att_loss(encoder_out, encoder_mask, text, text_lengths)
            acc_att = torch.tensor(acc)
            loss = loss + self.attention_weight * loss_att
        out = {"loss": loss, "loss_att": loss_att, "loss_ctc": loss_ctc,
               "loss_rnnt": loss_rnnt, "th_accuracy": acc_att}
        out.update(parts)
        return out

    @torch.jit.unused
    def _calc_rnnt_loss(self, encoder_out: torch.Tensor, encoder_out_lens: torch.Tensor,
                  text: torch.Tensor, text_lengths: torch.Tensor) -> torch.Tensor:
        """Transducer loss averaged over the batch (the configured implementation)."""
        T = int(encoder_out_lens.max())
        U = int(text_lengths.max())
        ys = text[:, :U].masked_fill(text[:, :U] == self.ignore_id, self.blank)
        ys_in = torch.cat([torch.full_like(ys[:, :1], self.blank), ys], dim=1)
        pred = self.joint.project_predictor(self.predictor(ys_in))  # (B, U+1, J)
        enc = self.joint.project_encoder(encoder_out[:, :T])  # (B, T, J)
        logits = self.joint(enc.unsqueeze(2), pred.unsqueeze(1))  # (B, T, U+1, V')
        if self.rnnt_loss_impl == "torchaudio":
            return taf.rnnt_loss(logits.float(), ys.int(), encoder_out_lens.int(),
                                 text_lengths.int(), blank=self.blank, clamp=self.rnnt_clamp,
                                 reduction="mean")
        return rnnt_loss(logits, ys, encoder_out_lens, text_lengths, blank=self.blank,
                         reduction="mean", fastemit_lambda=self.fastemit_lambda,
                         clamp=self.rnnt_clamp, big_blank_ids=self.big_ids,
                         big_blank_durations=self.durations)

    @torch.jit.unused
    def _calc_pruned_loss(self, encoder_out: torch.Tensor, encoder_out_lens: torch.Tensor,
                          text: torch.Tensor, text_lengths: torch.Tensor
                          ) -> Tuple[torch.Tensor, Dict[str, Optional[torch.Tensor]]]:
        """The warm-up blend of the simple and pruned losses (each averaged over the batch)."""
        T = int(encoder_out_lens.max())
        U = int(text_lengths.max())
        ys = text[:, :U].masked_fill(text[:, :U] == self.ignore_id, self.blank)
        ys_in = torch.cat([torch.full_like(ys[:, :1], self.blank), ys], dim=1)
        pred_out = self.predictor(ys_in)  # (B, U+1, P)
        enc = encoder_out[:, :T]
        with torch.autocast(enc.device.type, enabled=False):  # a lattice wants float32
            simple, (leave, label) = simple_rnnt_loss(
                self.simple_am_proj(enc.float()), self.simple_lm_proj(pred_out.float()), ys,
                encoder_out_lens, text_lengths, blank=self.blank, lm_scale=self.lm_scale,
                am_scale=self.am_scale, big_blank_ids=self.big_ids,
                big_blank_durations=self.durations, fastemit_lambda=self.fastemit_lambda)
        starts = pruning_bounds(leave, label, encoder_out_lens, text_lengths, self.prune_range)
        pruned = pruned_rnnt_loss(self.joint, self.joint.project_encoder(enc),
                                  self.joint.project_predictor(pred_out), ys, starts,
                                  self.prune_range, encoder_out_lens, text_lengths,
                                  blank=self.blank, big_blank_ids=self.big_ids,
                                  big_blank_durations=self.durations,
                                  fastemit_lambda=self.fastemit_lambda)
        s, p = warmup_scales(self.training_step, self.simple_loss_scale, self.prune_warmup_steps)
        return s * simple + p * pruned, {"loss_simple": simple, "loss_pruned": pruned}

    # ---- decoding interface (also exported for TorchScript runtimes) ----

    @torch.jit.export
    def blank_symbol(self) -> int:
        """The standard (one-frame) blank id."""
        return self.blank

    @torch.jit.export
    def big_blank_ids(self) -> List[int]:
        """Output ids of the big blanks (empty for a standard transducer)."""
        return self.big_ids

    @torch.jit.export
    def big_blank_durations(self) -> List[int]:
        """Frames advanced by each big blank, in the order of big_blank_ids()."""
        return self.durations

    @torch.jit.export
    def project_encoder(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """Encoder frames (..., D) -> joint inputs (..., J); once per frame."""
        return self.joint.project_encoder(encoder_out)

    @torch.jit.export
    def predictor_init_state(self, batch: int) -> List[torch.Tensor]:
        """Prediction-network state before any token (batch-first tensors)."""
        return self.predictor.init_state(batch, self.joint.out.weight.device)

    @torch.jit.export
    def forward_predictor_step(self, tokens: torch.Tensor, state: List[torch.Tensor]
                               ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Feed ``tokens`` (N,) -> projected predictor output (N, J) and the new state.
        Start every hypothesis by feeding the blank to the initial state."""
        out, new_state = self.predictor.forward_step(tokens, state)
        return self.joint.project_predictor(out), new_state

    @torch.jit.export
    def forward_joint_step(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor
                           ) -> torch.Tensor:
        """Logits (N, V') of projected encoder frames and predictor outputs (N, J) each."""
        return self.joint(enc_proj, pred_proj)


def _check_pruned_options(transducer_loss: str, rnnt_loss_impl: str, rnnt_clamp: float,
                          prune_range: int, lm_scale: float, am_scale: float,
                          simple_loss_scale: float) -> None:
    """Refuse option combinations the pruned loss does not define, naming them."""
    if transducer_loss not in ("full", "pruned"):
        raise ValueError(f"transducer_loss must be 'full' or 'pruned', got {transducer_loss!r}")
    if transducer_loss != "pruned":
        return
    if rnnt_loss_impl != "ours":
        raise ValueError("transducer_loss: pruned has its own implementation; rnnt_loss_impl "
                         f"{rnnt_loss_impl!r} applies to the full loss only (use ours)")
    if rnnt_clamp > 0:
        raise ValueError("rnnt_clamp is not defined for transducer_loss: pruned (set -1)")
    if prune_range < 2:
        raise ValueError(f"prune_range must be >= 2, got {prune_range}")
    if lm_scale < 0 or am_scale < 0 or lm_scale + am_scale > 1:
        raise ValueError(f"lm_scale {lm_scale} and am_scale {am_scale} must be >= 0 with a "
                         "sum <= 1")
    if not 0.0 <= simple_loss_scale <= 1.0:
        raise ValueError(f"simple_loss_scale must be in [0, 1], got {simple_loss_scale}")
