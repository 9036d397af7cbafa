"""Training losses of the ASR models: one class per loss; the model sums them.

A model holds its losses by name (``model.losses``, built by wenet/models/losses.py from
the ``LOSSES`` registry and the config). ``forward`` encodes the batch once, asks every
active loss for its outputs and returns ``loss = sum of weight * value`` with each loss's
outputs. A loss reads the heads it trains from the model (``model.ctc``, ``model.decoder``,
``model.predictor``...), so the state_dict names stay the model's. A new loss is a
:class:`Loss` subclass in its own module plus one entry in ``LOSSES``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple

import torch

from wenet.transformer.cr_ctc import consistency_loss, two_views
from wenet.transformer.label_smoothing_loss import LabelSmoothingLoss
from wenet.utils.common import add_sos_eos, reverse_pad_list, th_accuracy
from wenet.utils.mask import make_non_pad_mask

Outputs = Dict[str, Optional[torch.Tensor]]
Batch = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class LossInputs:
    """What every loss sees: the model (its heads), one encoder pass and the targets.

    encoder_out (B, T, D), encoder_mask (B, 1, T), encoder_out_lens (B,), text (B, L)
    padded with the model's ignore_id, text_lengths (B,).
    """

    model: torch.nn.Module
    encoder_out: torch.Tensor
    encoder_mask: torch.Tensor
    encoder_out_lens: torch.Tensor
    text: torch.Tensor
    text_lengths: torch.Tensor


class Loss(torch.nn.Module):
    """One weighted training loss. Subclasses set ``key`` (the output holding the value the
    weight multiplies), may list further ``outputs`` and the model ``heads`` they train,
    and implement :meth:`compute`. A loss of weight 0 is not computed (its outputs are None)
    and its heads are not required; ``active`` says which.

    A Module (without parameters of its own unless a new loss wants some) so that
    ``model.train()``/``.to()`` reach it; TorchScript leaves ``model.losses`` out.
    """

    key: str = ""
    outputs: Tuple[str, ...] = ()
    heads: Tuple[str, ...] = ()

    def __init__(self, weight: float = 1.0):
        super().__init__()
        if not weight >= 0.0:
            raise ValueError(f"{type(self).__name__}: weight must be >= 0, got {weight}")
        self.weight = float(weight)

    @property
    def active(self) -> bool:
        """Whether the model computes this loss."""
        return self.weight > 0.0

    def output_keys(self) -> Tuple[str, ...]:
        """The keys this loss adds to the model's output dict."""
        return (self.key,) + self.outputs

    def attach(self, model: torch.nn.Module) -> None:
        """Check the model has what this loss needs (it is in ``model.losses`` already);
        a loss that trains a head of its own adds it to the model here."""

    def views(self, batch: Batch) -> Batch:
        """The batch the encoder sees in training (CR-CTC's two masked views)."""
        return batch

    def set_training_step(self, step: int) -> None:
        """The number of updates made so far (a loss with a warm-up follows it)."""

    def compute(self, inputs: LossInputs) -> Outputs:
        """``{key: value, ...outputs}``; the value is averaged over the utterances."""
        raise NotImplementedError


class CTCLoss(Loss):
    """CTC on the model's CTC head (wenet/transformer/ctc.py).

    ``prior_weight`` alpha > 0 trains with label priors (Huang et al., "Less peaky and more
    accurate CTC forced alignment by label priors", ICASSP 2024): paths are scored by
    ``log p(y_t | x) - alpha * log prior(y_t)``, so a path with fewer blanks (the most
    probable label a priori) gains and the model learns posteriors that cover more of each
    token's frames instead of one spike. Off by default: in the main job alpha 0.1 gave
    plain CTC word times ~3 points more within 50 ms for 2.4 points more test WER, and 0.3
    let tokens fill the pauses (blank prior 0.09; WER 38 %) (RESULTS.md, issue 35). The
    prior is the mean posterior over the training frames, kept as a moving average over
    batches (``prior_momentum``: the share of each new batch; uniform at the start, where
    it shifts every path equally) in the buffer ``prior`` (saved with the model; present only when alpha > 0). Evaluation
    uses the prior as it stands, so a CV loss with priors is not comparable to one
    without.
    """

    key = "loss_ctc"
    heads = ("ctc",)
    PRIOR_FLOOR = 1e-6  # no label is boosted by more than alpha * log(1e6)

    def __init__(self, weight: float = 1.0, prior_weight: float = 0.0,
                 prior_momentum: float = 0.02):
        super().__init__(weight)
        if not prior_weight >= 0.0:
            raise ValueError(f"ctc prior_weight must be >= 0, got {prior_weight}")
        if not 0.0 < prior_momentum <= 1.0:
            raise ValueError(f"ctc prior_momentum must be in (0, 1], got {prior_momentum}")
        self.prior_weight = float(prior_weight)
        self.prior_momentum = float(prior_momentum)

    def attach(self, model: torch.nn.Module) -> None:
        if self.prior_weight > 0.0 and "prior" not in self._buffers:
            vocab = model.ctc.ctc_lo.out_features
            self.register_buffer("prior", torch.full((vocab,), 1.0 / vocab))

    def compute(self, inputs: LossInputs) -> Outputs:
        ctc = inputs.model.ctc
        if self.prior_weight == 0.0:
            return {self.key: ctc(inputs.encoder_out, inputs.encoder_out_lens,
                                  inputs.text, inputs.text_lengths)}
        log_probs = ctc.frame_log_probs(inputs.encoder_out)  # (T, B, V)
        if self.training:
            self.update_prior(log_probs.detach(), inputs.encoder_out_lens)
        log_prior = self.prior_weight * self.prior.clamp_min(self.PRIOR_FLOOR).log()
        return {self.key: ctc.loss(log_probs, inputs.encoder_out_lens, inputs.text,
                                   inputs.text_lengths, log_prior)}

    @torch.no_grad()
    def update_prior(self, log_probs: torch.Tensor, lens: torch.Tensor) -> None:
        """Move the prior towards the mean posterior of this batch's frames (T, B, V)."""
        valid = make_non_pad_mask(lens, log_probs.size(0)).t().to(log_probs.dtype)  # (T, B)
        mean = (log_probs.exp() * valid.unsqueeze(2)).sum((0, 1)) / valid.sum().clamp_min(1.0)
        self.prior.lerp_(mean.to(self.prior.dtype), self.prior_momentum)


class AttentionLoss(Loss):
    """Teacher-forced, label-smoothed loss of the attention decoder:
    ``(1 - reverse_weight) * left-to-right + reverse_weight * right-to-left`` (the
    latter needs the bitransformer decoder); ``th_accuracy`` is the left-to-right
    token accuracy. ``length_normalized_loss`` divides by tokens, not utterances."""

    key = "loss_att"
    outputs = ("th_accuracy",)
    heads = ("decoder",)

    def __init__(self, weight: float = 1.0, lsm_weight: float = 0.0,
                 length_normalized_loss: bool = False, reverse_weight: float = 0.0):
        super().__init__(weight)
        if not 0.0 <= reverse_weight <= 1.0:
            raise ValueError(f"reverse_weight must be in [0, 1], got {reverse_weight}")
        self.lsm_weight = lsm_weight
        self.length_normalized_loss = length_normalized_loss
        self.reverse_weight = reverse_weight

    def attach(self, model: torch.nn.Module) -> None:
        if self.reverse_weight > 0.0 and not hasattr(model.decoder, "right_decoder"):
            raise ValueError("reverse_weight > 0 needs the bitransformer decoder")
        self.criterion = LabelSmoothingLoss(model.vocab_size, model.ignore_id, self.lsm_weight,
                                            self.length_normalized_loss)

    def compute(self, inputs: LossInputs) -> Outputs:
        m, ys_pad, ys_pad_lens = inputs.model, inputs.text, inputs.text_lengths
        ys_in_pad, ys_out_pad = add_sos_eos(ys_pad, m.sos, m.eos, m.ignore_id)
        ys_in_lens = ys_pad_lens + 1
        r_ys_pad = reverse_pad_list(ys_pad, ys_pad_lens, float(m.ignore_id))
        r_ys_in_pad, r_ys_out_pad = add_sos_eos(r_ys_pad, m.sos, m.eos, m.ignore_id)
        decoder_out, r_decoder_out, _ = m.decoder(inputs.encoder_out, inputs.encoder_mask,
                                                  ys_in_pad, ys_in_lens, r_ys_in_pad,
                                                  self.reverse_weight)
        loss_att = self.criterion(decoder_out, ys_out_pad)
        if self.reverse_weight > 0.0:
            r_loss_att = self.criterion(r_decoder_out, r_ys_out_pad)
            loss_att = loss_att * (1 - self.reverse_weight) + r_loss_att * self.reverse_weight
        acc = th_accuracy(decoder_out.view(-1, m.vocab_size), ys_out_pad,
                          ignore_label=m.ignore_id)
        return {self.key: loss_att, "th_accuracy": torch.tensor(acc, device=decoder_out.device)}


class CRCTCLoss(Loss):
    """Consistency-regularised CTC (wenet/transformer/cr_ctc.py), training only: the
    encoder sees every batch in two views time-masked by ``time_mask_ratio`` (so the
    other losses become means over both views) and this loss is the consistency of the
    two views' CTC posteriors. On whenever configured (weight 0 keeps the two views
    without the consistency term); needs a CTC loss of weight > 0. None in eval."""

    key = "loss_cr"
    heads = ("ctc",)

    def __init__(self, weight: float = 0.2, time_mask_ratio: float = 2.5):
        super().__init__(weight)
        if time_mask_ratio < 0:
            raise ValueError(f"cr_ctc needs time_mask_ratio >= 0, got {time_mask_ratio}")
        self.time_mask_ratio = float(time_mask_ratio)

    @property
    def active(self) -> bool:
        return True

    def attach(self, model: torch.nn.Module) -> None:
        ctc = model.losses["ctc"] if "ctc" in model.losses else None
        if ctc is None or not ctc.active:
            raise ValueError("cr_ctc needs a CTC loss of weight > 0 (ctc_weight > 0)")

    def views(self, batch: Batch) -> Batch:
        return two_views(*batch, self.time_mask_ratio) if self.training else batch

    def compute(self, inputs: LossInputs) -> Outputs:
        if not self.training:
            return {self.key: None}
        return {self.key: consistency_loss(inputs.model.ctc.log_softmax(inputs.encoder_out),
                                           inputs.encoder_out_lens)}


def combine(losses: Iterable[Loss], inputs: LossInputs) -> Outputs:
    """The model's output dict: ``loss`` (the sum of weight * value over the active
    losses, in their order) and every loss's outputs (None where not computed)."""
    out: Outputs = {}
    total: Optional[torch.Tensor] = None
    for loss in losses:
        got = loss.compute(inputs) if loss.active else {}
        for key in loss.output_keys():
            out[key] = got.get(key)
        value = got.get(loss.key)
        if value is not None:
            total = loss.weight * value if total is None else total + loss.weight * value
    if total is None:
        raise ValueError("no loss to train on: give at least one loss a weight > 0")
    return {"loss": total, **out}
