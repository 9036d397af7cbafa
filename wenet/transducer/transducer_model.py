"""Transducer (RNN-T) model on the shared encoders, optionally with CTC and attention heads.

Trained on ``transducer_weight * loss_rnnt + ctc_weight * loss_ctc + attention_weight *
loss_att`` (the losses of wenet/transducer/losses.py and wenet/transformer/losses.py, each
averaged over the utterances of the batch).  A head whose loss has weight 0 is not built.
Output units: the vocabulary (blank 0, sos/eos last, as the other models) followed by the
big blanks of a multi-blank model (``big_blank_durations``; id ``vocab_size + i`` advances
``durations[i]`` frames).
"""

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from wenet.transducer.joint import TransducerJoint
from wenet.transformer.asr_model import ASRModel
from wenet.transformer.ctc import CTC
from wenet.transformer.losses import Loss
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

    Trained on its ``losses`` (the ``transducer`` loss, wenet/transducer/losses.py, and
    optionally ``ctc`` and ``attention``); the factory builds a CTC head or a decoder only
    for a loss of weight > 0 that trains it, and puts placeholders otherwise.

    The decoding interface (used by the transducer searches in wenet/decode/ and exported for
    runtimes): ``project_encoder``, ``predictor_init_state``,
    ``forward_predictor_step``, ``forward_joint_step``, ``blank_symbol``,
    ``big_blank_ids``, ``big_blank_durations``.
    """

    __jit_unused_properties__ = ["reverse_weight", "attention_weight"]
    durations: List[int]  # annotated for TorchScript (may be empty)
    big_ids: List[int]

    def __init__(self, vocab_size: int, encoder: torch.nn.Module, predictor: torch.nn.Module,
                 joint: TransducerJoint, ctc: Optional[CTC] = None,
                 decoder: Optional[torch.nn.Module] = None,
                 losses: Optional[Dict[str, Loss]] = None, ignore_id: int = IGNORE_ID,
                 big_blank_durations: Sequence[int] = ()):
        super().__init__(vocab_size, encoder, decoder if decoder is not None else _MissingDecoder(),
                         ctc if ctc is not None else _MissingCTC(), ignore_id=ignore_id)
        self.predictor = predictor
        self.joint = joint
        self.blank = 0
        self.durations: List[int] = [int(d) for d in big_blank_durations]
        self.big_ids: List[int] = [vocab_size + i for i in range(len(self.durations))]
        self.set_losses(losses or {})  # after the heads: a loss may add its own

    @property
    def attention_weight(self) -> float:
        """The attention loss's weight (0.0 without one: then there is no decoder)."""
        att = self.losses["attention"] if "attention" in self.losses else None
        return float(getattr(att, "weight", 0.0))

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

