"""Sinusoidal positional encodings with an offset, so streaming chunks get the right positions."""
from __future__ import annotations

import math
from typing import Tuple

import torch


class PositionalEncoding(torch.nn.Module):
    """Absolute encoding: x * sqrt(d_model) + PE[offset:offset+T].

    Returns the scaled input and the PE slice (used by relative attention; the
    absolute model ignores it). The table is a non-persistent buffer: it is
    rebuilt from ``max_len`` and kept out of checkpoints, as in WeNet.
    """

    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.dropout = torch.nn.Dropout(p=dropout_rate)
        self.max_len = max_len
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                             * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def position_encoding(self, offset: int, size: int,
                          apply_dropout: bool = True) -> torch.Tensor:
        """PE rows offset..offset+size-1 as (1, size, d_model)."""
        if offset < 0 or offset + size > self.max_len:
            raise ValueError(f"positions {offset}..{offset + size} exceed the "
                             f"positional table of {self.max_len}")
        pos_emb = self.pe[:, offset:offset + size]
        if apply_dropout:
            pos_emb = self.dropout(pos_emb)
        return pos_emb

    def rows_at(self, positions: torch.Tensor) -> torch.Tensor:
        """PE rows (1, N, d_model) at int64 ``positions`` (N,), a tensor so that a traced
        graph keeps them as data. A negative position (an unfilled, masked cache slot
        of a fixed-size streaming cache) reads row 0."""
        if not torch.jit.is_tracing() and positions.numel() > 0 \
                and int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} exceeds the "
                             f"positional table of {self.max_len}")
        return self.pe[0].index_select(0, positions.clamp(min=0)).unsqueeze(0)

    def add_encoding(self, x: torch.Tensor,
                     pos_emb: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(dropout(x * xscale + pos_emb), dropout(pos_emb)) for x (B, T, D), pos_emb (1, T, D)."""
        x = x * self.xscale + pos_emb
        return self.dropout(x), self.dropout(pos_emb)

    def forward(self, x: torch.Tensor, offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) → ``add_encoding`` with PE rows offset..offset+T-1."""
        return self.add_encoding(x, self.position_encoding(offset, x.size(1), False))


class RelPositionalEncoding(PositionalEncoding):
    """Encoding for relative-position attention: the input is only scaled;
    the PE slice goes to the attention layers, which project it (linear_pos)."""

    def add_encoding(self, x: torch.Tensor,
                     pos_emb: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(dropout(x * xscale), dropout(pos_emb))."""
        return self.dropout(x * self.xscale), self.dropout(pos_emb)
