"""Convolutional front ends that shorten the frame sequence 4×, 6× or 8× (or not at all).

The convolutions have ``channels`` filters (0: the encoder's output size, as in
WeNet, so its checkpoints load). The second convolution works at a quarter of
the input frame rate on a 19-bin-wide map and dominates a small model's cost
per audio second; fewer channels (e.g. 32 for a 144-dim encoder) make CPU
training several times faster.
"""
from __future__ import annotations

from typing import List, Tuple

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


class Conv2dFrontEnd(BaseSubsampling):
    """2-D convolutions over (time, bins), each ``(kernel, stride)`` of ``LAYERS`` with
    no padding and a ReLU; subclasses add the Linear that maps their output to odim.

    Output frame j of a layer reads its input frames j * stride .. j * stride + kernel - 1,
    so the layers together give ``subsampling_rate`` = the product of the strides and
    ``right_context`` = the sum of (kernel - 1) times the strides of the layers before.
    """

    LAYERS: Tuple[Tuple[int, int], ...] = ()

    def __init__(self, idim: int, odim: int, pos_enc: PositionalEncoding, channels: int = 0):
        super().__init__(pos_enc)
        c = channels if channels > 0 else odim
        convs: List[torch.nn.Module] = []
        bins, in_channels = idim, 1
        for kernel, stride in self.LAYERS:
            convs += [torch.nn.Conv2d(in_channels, c, kernel, stride), torch.nn.ReLU()]
            bins = (bins - kernel) // stride + 1
            self.right_context += (kernel - 1) * self.subsampling_rate
            self.subsampling_rate *= stride
            in_channels = c
        self.conv = torch.nn.Sequential(*convs)
        # input features of the Linear: channels × remaining frequency bins
        self.conv_out_dim = c * bins
        # (first kept frame, step) per layer, for the output mask
        self.mask_slices: List[Tuple[int, int]] = [(k - 1, s) for k, s in self.LAYERS]

    def _conv_frames(self, x: torch.Tensor) -> torch.Tensor:
        """The convolutions over x (B, T, idim), channels and remaining bins flattened
        per output frame: (B, T', conv_out_dim)."""
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        return x.transpose(1, 2).contiguous().view(b, t, c * f)

    def subsample_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, T) → (B, 1, T'): each layer keeps every stride-th frame from its kernel-th."""
        for first, step in self.mask_slices:
            x_mask = x_mask[:, :, first::step]
        return x_mask


class Conv2dSubsampling4(Conv2dFrontEnd):
    """Two 3×3 stride-2 convolutions: T' = ((T - 1) // 2 - 1) // 2; receptive field 7 frames."""

    LAYERS = ((3, 2), (3, 2))

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(idim, odim, pos_enc, channels)
        # WeNet's name for this one front end's Linear: out.0
        self.out = torch.nn.Sequential(torch.nn.Linear(self.conv_out_dim, odim))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim)."""
        return self.out(self._conv_frames(x))


class _LinearHeadFrontEnd(Conv2dFrontEnd):
    """A convolutional front end whose Linear is named ``linear`` (WeNet's 6× and 8×)."""

    def __init__(self, idim: int, odim: int, dropout_rate: float, pos_enc: PositionalEncoding,
                 channels: int = 0):
        super().__init__(idim, odim, pos_enc, channels)
        self.linear = torch.nn.Linear(self.conv_out_dim, odim)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, idim) → (B, T', odim)."""
        return self.linear(self._conv_frames(x))


class Conv2dSubsampling6(_LinearHeadFrontEnd):
    """3×3 stride-2 then 5×5 stride-3 convolution: T' = ((T - 1) // 2 - 2) // 3;
    receptive field 11 frames."""

    LAYERS = ((3, 2), (5, 3))


class Conv2dSubsampling8(_LinearHeadFrontEnd):
    """Three 3×3 stride-2 convolutions: T' = (((T - 1) // 2 - 1) // 2 - 1) // 2;
    receptive field 15 frames."""

    LAYERS = ((3, 2), (3, 2), (3, 2))


SUBSAMPLING_CLASSES = {
    "linear": LinearNoSubsampling,
    "conv2d": Conv2dSubsampling4,
    "conv2d6": Conv2dSubsampling6,
    "conv2d8": Conv2dSubsampling8,
}
