"""The Zipformer's convolutional front end: 100 Hz features -> 50 Hz frames.

Three 3x3 convolutions over (time, frequency), each followed by SwooshR (or ReLU,
``frontend_activation``): stride 1, then 2 in both axes, then 2 in frequency only; no
padding in time, so T input frames give (T - 7) // 2 output frames and output frame j reads input frames 2j .. 2j + 8
(streaming windows overlap by 7 frames and need no cache). A Linear maps the
channels x bins to the first stack's width, followed by BiasNorm and dropout.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from wenet.zipformer.scaling import BiasNorm, SwooshR

FRONT_END_CONTEXT = 9  # input frames of one 50 Hz output frame
# SwooshR as in the paper; ReLU costs far less on a CPU (the maps are at 100 Hz)
ACTIVATIONS = {"swoosh_r": SwooshR, "relu": torch.nn.ReLU}


def front_end_frames(num_frames: torch.Tensor) -> torch.Tensor:
    """Output frames for ``num_frames`` input frames: (T - 7) // 2, at least 0."""
    return torch.div(num_frames - 7, 2, rounding_mode="floor").clamp(min=0)


class ZipformerFrontEnd(torch.nn.Module):
    """(B, T, idim) -> (B, (T - 7) // 2, odim).

    ``subsampling_rate`` and ``right_context`` are the numbers a streaming runtime
    reads through ``encoder.embed``: those of the whole encoder (this front end's 2x
    and 8 frames of right context, then the encoder's final ``output_factor`` x
    downsampling), not of this module alone.
    """

    def __init__(self, idim: int, odim: int, channels: Sequence[int] = (8, 32, 128),
                 dropout_rate: float = 0.1, output_factor: int = 2,
                 activation: str = "swoosh_r"):
        super().__init__()
        if len(channels) != 3:
            raise ValueError(f"frontend_channels needs 3 values, got {list(channels)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"frontend_activation '{activation}' is not one of "
                             f"{sorted(ACTIVATIONS)}")
        c1, c2, c3 = channels
        act = ACTIVATIONS[activation]
        layers: List[torch.nn.Module] = [
            torch.nn.Conv2d(1, c1, 3, stride=1, padding=(0, 1)), act(),
            torch.nn.Conv2d(c1, c2, 3, stride=2), act(),
            torch.nn.Conv2d(c2, c3, 3, stride=(1, 2)), act(),
        ]
        self.conv = torch.nn.Sequential(*layers)
        bins = ((idim - 1) // 2 - 1) // 2
        if bins < 1:
            raise ValueError(f"input_dim {idim} is too small for the Zipformer front end")
        self.out = torch.nn.Linear(c3 * bins, odim)
        self.norm = BiasNorm(odim)
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.context = FRONT_END_CONTEXT  # input frames of one 50 Hz frame
        self.subsampling_rate = 2 * output_factor
        self.right_context = 8 + 2 * (output_factor - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        return self.dropout(self.norm(x))
