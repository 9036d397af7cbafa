"""Conformer convolution module: pointwise-GLU, depthwise conv, norm, activation, pointwise."""
from __future__ import annotations

from typing import Tuple

import torch


class ConvolutionModule(torch.nn.Module):
    """The Conformer convolution block.

    ``causal`` pads only on the left (kernel_size - 1 frames), so an output
    frame never sees the future and streaming needs a cache of the last
    kernel_size - 1 input frames instead of a look-ahead. ``norm`` is
    ``batch_norm`` or ``layer_norm``.
    """

    def __init__(self, channels: int, kernel_size: int = 15,
                 activation: torch.nn.Module = torch.nn.ReLU(),
                 norm: str = "batch_norm", causal: bool = False, bias: bool = True):
        super().__init__()
        if causal:
            padding = 0
            self.lorder = kernel_size - 1
        else:
            if (kernel_size - 1) % 2 != 0:
                raise ValueError(f"non-causal cnn_module_kernel must be odd, got {kernel_size}")
            padding = (kernel_size - 1) // 2
            self.lorder = 0
        self.pointwise_conv1 = torch.nn.Conv1d(channels, 2 * channels, 1, bias=bias)
        self.depthwise_conv = torch.nn.Conv1d(channels, channels, kernel_size, stride=1,
                                              padding=padding, groups=channels, bias=bias)
        if norm == "batch_norm":
            self.use_layer_norm = False
            self.norm = torch.nn.BatchNorm1d(channels)
        elif norm == "layer_norm":
            self.use_layer_norm = True
            self.norm = torch.nn.LayerNorm(channels)
        else:
            raise ValueError(f"unknown cnn_module_norm '{norm}' (batch_norm or layer_norm)")
        self.pointwise_conv2 = torch.nn.Conv1d(channels, channels, 1, bias=bias)
        self.activation = activation

    def forward(self, x: torch.Tensor,
                mask_pad: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool),
                cache: torch.Tensor = torch.zeros((0, 0, 0))
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C), mask_pad (B, 1, T) True at real frames, cache (B, C, lorder).

        Returns (out (B, T, C), new_cache (B, C, lorder); empty when not causal).
        Padded frames are zeroed before and after the convolution so they do
        not leak into real frames.
        """
        x = x.transpose(1, 2)  # (B, C, T)
        if mask_pad.size(2) > 0:
            x = x.masked_fill(~mask_pad, 0.0)
        if self.lorder > 0:
            if cache.size(2) == 0:
                x = torch.nn.functional.pad(x, (self.lorder, 0), "constant", 0.0)
            else:
                x = torch.cat((cache, x), dim=2)
            new_cache = x[:, :, -self.lorder:]
        else:
            new_cache = torch.zeros((0, 0, 0), dtype=x.dtype, device=x.device)
        x = self.pointwise_conv1(x)
        x = torch.nn.functional.glu(x, dim=1)
        if self.lorder == 0 and mask_pad.size(2) > 0:
            # pointwise_conv1's bias makes zeroed padding non-zero again; the
            # depthwise convolution of an unpadded utterance sees zeros past its
            # end, so zero the padding here too and batching cannot change results
            x = x.masked_fill(~mask_pad, 0.0)
        x = self.depthwise_conv(x)
        if self.use_layer_norm:
            x = self.activation(self.norm(x.transpose(1, 2))).transpose(1, 2)
        else:
            x = self.activation(self.norm(x))
        x = self.pointwise_conv2(x)
        if mask_pad.size(2) > 0:
            x = x.masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2), new_cache
