"""The transducer (RNN-T) loss of a TransducerModel, as a :class:`Loss` of the registry.

``transducer_loss``: ``full`` evaluates the joint on the whole (T, U+1) lattice
(``rnnt_loss_impl`` ``ours``, wenet/transducer/rnnt_loss.py, with FastEmit and big
blanks, or torchaudio's); ``pruned`` (wenet/transducer/pruned_loss.py) trains the
model's simple projections ``simple_am_proj`` / ``simple_lm_proj`` (added to the model
by this loss) on ``s * loss_simple + p * loss_pruned``, with (s, p) moving from (1, 0.1)
to (``simple_loss_scale``, 1) over ``prune_warmup_steps`` updates.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torchaudio.functional as taf

from wenet.transducer.pruned_loss import (pruned_rnnt_loss, pruning_bounds, simple_rnnt_loss,
                                          warmup_scales)
from wenet.transducer.rnnt_loss import rnnt_loss
from wenet.transformer.losses import Loss, LossInputs, Outputs


class TransducerLoss(Loss):
    """The RNN-T loss averaged over the utterances (``loss_rnnt``; with the pruned loss
    also ``loss_simple`` and ``loss_pruned``, of which it is the warm-up blend)."""

    key = "loss_rnnt"
    heads = ("predictor", "joint")

    def __init__(self, weight: float = 1.0, rnnt_loss_impl: str = "ours",
                 fastemit_lambda: float = 0.0, rnnt_clamp: float = -1.0,
                 transducer_loss: str = "full", prune_range: int = 5, lm_scale: float = 0.25,
                 am_scale: float = 0.0, simple_loss_scale: float = 0.5,
                 prune_warmup_steps: int = 2000):
        super().__init__(weight)
        if self.weight <= 0.0:
            raise ValueError(f"transducer_weight must be > 0, got {weight}")
        if rnnt_loss_impl not in ("ours", "torchaudio"):
            raise ValueError(f"rnnt_loss_impl must be 'ours' or 'torchaudio', got {rnnt_loss_impl!r}")
        _check_pruned_options(transducer_loss, rnnt_loss_impl, rnnt_clamp, prune_range,
                              lm_scale, am_scale, simple_loss_scale)
        self.rnnt_loss_impl = rnnt_loss_impl
        self.fastemit_lambda = fastemit_lambda
        self.rnnt_clamp = rnnt_clamp
        self.transducer_loss = transducer_loss
        self.prune_range = prune_range
        self.lm_scale = lm_scale
        self.am_scale = am_scale
        self.simple_loss_scale = simple_loss_scale
        self.prune_warmup_steps = prune_warmup_steps
        self.training_step = 0
        if transducer_loss == "pruned":
            self.outputs = ("loss_simple", "loss_pruned")

    def attach(self, model: torch.nn.Module) -> None:
        if self.rnnt_loss_impl == "torchaudio" and (self.fastemit_lambda > 0 or model.durations):
            raise ValueError("torchaudio's rnnt_loss has no FastEmit or multi-blank: use "
                             "rnnt_loss_impl: ours")
        if self.transducer_loss == "pruned":  # the simple loss's own projections to the outputs
            outputs = model.joint.out.out_features
            model.simple_am_proj = torch.nn.Linear(model.encoder.output_size(), outputs)
            model.simple_lm_proj = torch.nn.Linear(model.predictor.output_size(), outputs)

    def set_training_step(self, step: int) -> None:
        self.training_step = step

    def compute(self, inputs: LossInputs) -> Outputs:
        if self.transducer_loss == "pruned":
            return self._pruned(inputs)
        return {self.key: self._full(inputs)}

    @staticmethod
    def _targets(inputs: LossInputs) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Targets (B, U) with padding as blank, the predictor output (B, U+1, P) of
        blank + targets, and the encoder output cut to its longest utterance (B, T, D)."""
        m, text = inputs.model, inputs.text
        U = int(inputs.text_lengths.max())
        ys = text[:, :U].masked_fill(text[:, :U] == m.ignore_id, m.blank)
        ys_in = torch.cat([torch.full_like(ys[:, :1], m.blank), ys], dim=1)
        T = int(inputs.encoder_out_lens.max())
        return ys, m.predictor(ys_in), inputs.encoder_out[:, :T]

    def _full(self, inputs: LossInputs) -> torch.Tensor:
        """Transducer loss averaged over the batch (the configured implementation)."""
        m, lens, text_lengths = inputs.model, inputs.encoder_out_lens, inputs.text_lengths
        ys, pred_out, enc_out = self._targets(inputs)
        pred = m.joint.project_predictor(pred_out)  # (B, U+1, J)
        enc = m.joint.project_encoder(enc_out)  # (B, T, J)
        logits = m.joint(enc.unsqueeze(2), pred.unsqueeze(1))  # (B, T, U+1, V')
        if self.rnnt_loss_impl == "torchaudio":
            return taf.rnnt_loss(logits.float(), ys.int(), lens.int(), text_lengths.int(),
                                 blank=m.blank, clamp=self.rnnt_clamp, reduction="mean")
        return rnnt_loss(logits, ys, lens, text_lengths, blank=m.blank, reduction="mean",
                         fastemit_lambda=self.fastemit_lambda, clamp=self.rnnt_clamp,
                         big_blank_ids=m.big_ids, big_blank_durations=m.durations)

    def _pruned(self, inputs: LossInputs) -> Outputs:
        """The warm-up blend of the simple and pruned losses (each averaged over the batch)."""
        m, lens, text_lengths = inputs.model, inputs.encoder_out_lens, inputs.text_lengths
        ys, pred_out, enc = self._targets(inputs)
        with torch.autocast(enc.device.type, enabled=False):  # a lattice wants float32
            simple, (leave, label) = simple_rnnt_loss(
                m.simple_am_proj(enc.float()), m.simple_lm_proj(pred_out.float()), ys,
                lens, text_lengths, blank=m.blank, lm_scale=self.lm_scale,
                am_scale=self.am_scale, big_blank_ids=m.big_ids,
                big_blank_durations=m.durations, fastemit_lambda=self.fastemit_lambda)
        starts = pruning_bounds(leave, label, lens, text_lengths, self.prune_range)
        pruned = pruned_rnnt_loss(m.joint, m.joint.project_encoder(enc),
                                  m.joint.project_predictor(pred_out), ys, starts,
                                  self.prune_range, lens, text_lengths, blank=m.blank,
                                  big_blank_ids=m.big_ids, big_blank_durations=m.durations,
                                  fastemit_lambda=self.fastemit_lambda)
        s, p = warmup_scales(self.training_step, self.simple_loss_scale, self.prune_warmup_steps)
        return {self.key: s * simple + p * pruned, "loss_simple": simple, "loss_pruned": pruned}


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
