"""Kaldi-compatible log-mel filterbank features, one definition for CMVN and training."""
from __future__ import annotations

import torch
import torchaudio.compliance.kaldi as kaldi


def compute_fbank(wav: torch.Tensor, sample_rate: int, num_mel_bins: int = 80,
                  frame_length: float = 25.0, frame_shift: float = 10.0,
                  dither: float = 0.0) -> torch.Tensor:
    """(1, samples) float waveform in [-1, 1] → (frames, num_mel_bins) fbank.

    The waveform is scaled to the int16 range first, as Kaldi and WeNet do, so
    features match theirs.
    """
    return kaldi.fbank(wav * (1 << 15), num_mel_bins=num_mel_bins,
                       frame_length=frame_length, frame_shift=frame_shift,
                       dither=dither, energy_floor=0.0, sample_frequency=sample_rate)
