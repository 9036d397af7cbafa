"""Convolutional front ends that shorten the frame sequence 4×, 6× or 8× (or not at all).

The convolutions have ``channels`` filters (0: the encoder's output size, as in
WeNet, so its checkpoints load). The second convolution works at a quarter of
the input frame rate on a 19-bin-wide map and dominates a small model's cost
per audio second; fewer channels (e.g. 32 for a 144-dim encoder) make CPU
training several times faster.
"""
from __future__ import annotations

from typing import Tuple

import torch

from wenet.transformer.embedding import PositionalEncoding


class BaseSubsampling(torch.nn.Module):
    """Holds the positional encoding and the two numbers a streaming runtime needs.

    ``subsampling_rate``: input frames per output frame. ``right_context``:
    extra input frames (beyond the first) that one output frame looks at.
    """

    def __init__(self, pos_enc: PositionalEncoding):
        super().__init__()
        self.pos_enc = pos_enc
        self.subsampling_rate = 1
        self.right_context = 0

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim) before the positional encoding."""
        raise NotImplementedError

    def subsample_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """Input mask (B, 1, T) → the mask (B, 1, T') of the output frames."""
        return x_mask

    def _conv_frames(self, x: torch.Tensor) -> torch.Tensor:
        """The 2-D convolutions ``self.conv`` of a convolutional front end over x (B, T, idim),
        channels and remaining bins flattened per output frame: (B, T', c * f)."""
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        return x.transpose(1, 2).contiguous().view(b, t, c * f)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor,
                offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, idim), x_mask (B, 1, T) → (x (B, T', odim), pos_emb (1, T', odim),
        mask (B, 1, T')), positions counted from output frame ``offset``."""
        x, pos_emb = self.pos_enc(self.project(x), offset)
        return x, pos_emb, self.subsample_mask(x_mask)


class LinearNoSubsampling(BaseSubsampling):
    """Linear projection + LayerNorm, no change in frame rate (input_layer: linear)."""

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(pos_enc)
        self.out = torch.nn.Sequential(
            torch.nn.Linear(idim, odim),
            torch.nn.LayerNorm(odim, eps=1e-5),
            torch.nn.Dropout(dropout_rate),
        )

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T, odim)."""
        return self.out(x)


class Conv2dSubsampling4(BaseSubsampling):
    """Two 3×3 stride-2 convolutions: T' = ((T - 1) // 2 - 1) // 2."""

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(pos_enc)
        c = channels if channels > 0 else odim
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(1, c, 3, 2), torch.nn.ReLU(),
            torch.nn.Conv2d(c, c, 3, 2), torch.nn.ReLU(),
        )
        self.out = torch.nn.Sequential(torch.nn.Linear(c * (((idim - 1) // 2 - 1) // 2), odim))
        self.subsampling_rate = 4
        # receptive field 7 frames: 6 beyond the first
        self.right_context = 6

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim)."""
        return self.out(self._conv_frames(x))

    def subsample_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, T) → (B, 1, T'): each stride-2 convolution keeps every 2nd frame
        from the 3rd."""
        return x_mask[:, :, 2::2][:, :, 2::2]


class Conv2dSubsampling6(BaseSubsampling):
    """3×3 stride-2 then 5×5 stride-3 convolution: T' = ((T - 1) // 2 - 2) // 3."""

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(pos_enc)
        c = channels if channels > 0 else odim
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(1, c, 3, 2), torch.nn.ReLU(),
            torch.nn.Conv2d(c, c, 5, 3), torch.nn.ReLU(),
        )
        self.linear = torch.nn.Linear(c * (((idim - 1) // 2 - 2) // 3), odim)
        self.subsampling_rate = 6
        # receptive field 11 frames
        self.right_context = 10

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim)."""
        return self.linear(self._conv_frames(x))

    def subsample_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, T) → (B, 1, T'): every 2nd frame from the 3rd, then every 3rd from the 5th."""
        return x_mask[:, :, 2::2][:, :, 4::3]


class Conv2dSubsampling8(BaseSubsampling):
    """Three 3×3 stride-2 convolutions: T' = (((T - 1) // 2 - 1) // 2 - 1) // 2."""

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(pos_enc)
        c = channels if channels > 0 else odim
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(1, c, 3, 2), torch.nn.ReLU(),
            torch.nn.Conv2d(c, c, 3, 2), torch.nn.ReLU(),
            torch.nn.Conv2d(c, c, 3, 2), torch.nn.ReLU(),
        )
        self.linear = torch.nn.Linear(c * ((((idim - 1) // 2 - 1) // 2 - 1) // 2), odim)
        self.subsampling_rate = 8
        # receptive field 15 frames
        self.right_context = 14

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim)."""
        return self.linear(self._conv_frames(x))

    def subsample_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, T) → (B, 1, T'): three times every 2nd frame from the 3rd."""
        return x_mask[:, :, 2::2][:, :, 2::2][:, :, 2::2]


SUBSAMPLING_CLASSES = {
    "linear": LinearNoSubsampling,
    "conv2d": Conv2dSubsampling4,
    "conv2d6": Conv2dSubsampling6,
    "conv2d8": Conv2dSubsampling8,
}
