"""Prediction networks of the transducer: what has been emitted so far -> a vector.

Both predictors read the label history with the blank id as start symbol: for
labels ``y_1..y_U`` the training forward consumes ``[blank, y_1, ..., y_U]`` and
returns one output per prefix length 0..U.  Decoding uses the same network one
token at a time::

    state = predictor.init_state(batch, device)
    out, state = predictor.forward_step(blank_tokens, state)   # empty prefix
    out, state = predictor.forward_step(new_tokens, state)     # after a label

States are lists of batch-first tensors, so searches can select, reorder and
merge them without knowing which predictor made them.
"""
from __future__ import annotations

from typing import List, Tuple

import torch


class StatelessPredictor(torch.nn.Module):
    """Embedding of the last ``context_size`` tokens, mixed by a 1-D convolution (icefall's
    stateless decoder, Ghodsi et al. 2020), then ReLU.

    The history is left-padded with blanks; ``context_size`` 1 is a bigram model
    (embedding + ReLU).  The state is the ``context_size - 1`` previous tokens.
    """

    def __init__(self, vocab_size: int, embed_size: int = 256, context_size: int = 2,
                 blank_id: int = 0, embed_dropout: float = 0.0):
        super().__init__()
        if context_size < 1:
            raise ValueError(f"context_size must be >= 1, got {context_size}")
        self.embed = torch.nn.Embedding(vocab_size, embed_size)
        self.dropout = torch.nn.Dropout(embed_dropout)
        self.context_size = context_size
        self.blank_id = blank_id
        self.embed_size = embed_size
        self.conv = torch.nn.Conv1d(embed_size, embed_size, kernel_size=context_size,
                                    bias=False)

    def output_size(self) -> int:
        return self.embed_size

    def _mix(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, L + context_size - 1) -> (B, L, D): conv over each window."""
        x = self.dropout(self.embed(tokens)).transpose(1, 2)  # (B, D, L')
        return torch.relu(self.conv(x).transpose(1, 2))

    def forward(self, ys_in: torch.Tensor) -> torch.Tensor:
        """ys_in (B, L) starting with blank, padding any valid id -> (B, L, D)."""
        pad = torch.full((ys_in.size(0), self.context_size - 1), self.blank_id,
                         dtype=ys_in.dtype, device=ys_in.device)
        return self._mix(torch.cat([pad, ys_in], dim=1))

    def init_state(self, batch: int, device: torch.device) -> List[torch.Tensor]:
        """The state before anything was consumed: ``context_size - 1`` blanks per row."""
        return [torch.full((batch, self.context_size - 1), self.blank_id, dtype=torch.long,
                           device=device)]

    def forward_step(self, tokens: torch.Tensor, state: List[torch.Tensor]
                     ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Consume ``tokens`` (B,) -> output (B, D) and the new state."""
        window = torch.cat([state[0], tokens.view(-1, 1)], dim=1)
        out = self._mix(window).squeeze(1)
        return out, [window[:, 1:]]


class LSTMPredictor(torch.nn.Module):
    """Embedding, LSTM and a linear projection (the classic RNN-T prediction network).

    The state is ``[h, c]``, each (B, num_layers, hidden_size) (batch first).
    """

    def __init__(self, vocab_size: int, embed_size: int = 256, hidden_size: int = 256,
                 num_layers: int = 1, output_size: int = 256, dropout: float = 0.1,
                 embed_dropout: float = 0.0, blank_id: int = 0):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, embed_size)
        self.dropout = torch.nn.Dropout(embed_dropout)
        self.rnn = torch.nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True,
                                 dropout=dropout if num_layers > 1 else 0.0)
        self.proj = torch.nn.Linear(hidden_size, output_size)
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.out_size = output_size
        self.blank_id = blank_id

    def output_size(self) -> int:
        return self.out_size

    def forward(self, ys_in: torch.Tensor) -> torch.Tensor:
        """ys_in (B, L) starting with blank -> (B, L, D) (causal, so padding is harmless)."""
        x = self.dropout(self.embed(ys_in))
        if not torch.jit.is_scripting():
            out = self._rnn_eager(x)
        else:
            out, _ = self.rnn(x)
        return self.proj(out)

    @torch.jit.unused
    def _rnn_eager(self, x: torch.Tensor) -> torch.Tensor:
        """The LSTM over x (B, L, E). Under CPU autocast it runs in float32: oneDNN has no
        bf16 LSTM on CPUs without native bf16 (AMD EPYC with AVX2 only: "could not create
        a primitive descriptor for the LSTM forward propagation primitive"), and this
        small network gains nothing from it. On a GPU autocast applies as usual."""
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                return self.rnn(x.float())[0]
        return self.rnn(x)[0]

    def init_state(self, batch: int, device: torch.device) -> List[torch.Tensor]:
        """Zero LSTM state, [h, c] of shape (B, num_layers, hidden)."""
        zeros = torch.zeros(batch, self.num_layers, self.hidden_size, device=device)
        return [zeros, zeros.clone()]

    def forward_step(self, tokens: torch.Tensor, state: List[torch.Tensor]
                     ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Consume ``tokens`` (B,) -> output (B, D) and the new state."""
        h = state[0].transpose(0, 1).contiguous()
        c = state[1].transpose(0, 1).contiguous()
        x = self.dropout(self.embed(tokens.view(-1, 1)))
        out, (h, c) = self.rnn(x, (h, c))
        return self.proj(out.squeeze(1)), [h.transpose(0, 1), c.transpose(0, 1)]


PREDICTORS = {"stateless": StatelessPredictor, "lstm": LSTMPredictor}
