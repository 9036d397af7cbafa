"""Kaldi-compatible log-mel filterbank in numpy: the features of training
(``wenet.dataset.fbank.compute_fbank`` without dither and VTLN) with no torch.

Same steps, same float32 arithmetic as the torch function: samples scaled to the
int16 range, frames of ``frame_length`` ms every ``frame_shift`` ms (snip edges),
DC removal, pre-emphasis 0.97, Povey window, power spectrum of the next power-of-two
FFT, Kaldi's mel banks (20 Hz to Nyquist), log with a float32-eps floor. The two agree
to float32 rounding (tests/runtime/test_fbank.py states the tolerance).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np

_PREEMPHASIS = 0.97   # Kaldi's default pre-emphasis coefficient
_LOW_FREQ = 20.0      # Hz, Kaldi's default lowest mel-bank edge
_EPS = np.finfo(np.float32).eps


@dataclass(frozen=True)
class FbankOptions:
    """The features a model was trained on (the encoder's ONNX metadata holds them)."""

    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length: float = 25.0  # ms
    frame_shift: float = 10.0   # ms

    @property
    def window_size(self) -> int:
        """Samples per frame."""
        return int(self.sample_rate * self.frame_length * 0.001)

    @property
    def window_shift(self) -> int:
        """Samples between the starts of two frames."""
        return int(self.sample_rate * self.frame_shift * 0.001)

    def num_frames(self, num_samples: int) -> int:
        """Frames of ``num_samples`` samples (Kaldi framing with snip_edges)."""
        if num_samples < self.window_size:
            return 0
        return 1 + (num_samples - self.window_size) // self.window_shift


def _f32(values) -> np.ndarray:
    """``values`` rounded to float32 (kept as float64): emulates one correctly rounded
    float32 operation, so the tables below come out bit-identical to torchaudio's."""
    return np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)


def mel_banks(num_bins: int, fft_size: int, sample_rate: float) -> np.ndarray:
    """Kaldi's triangular mel banks (num_bins, fft_size // 2) without VTLN, float32: the
    values torchaudio's ``get_mel_banks`` computes, operation by operation in float32."""
    if num_bins <= 3:
        raise ValueError(f"Kaldi mel banks need at least 4 bins, got {num_bins}")
    mel_low = _f32(1127.0 * math.log(1.0 + _LOW_FREQ / 700.0))
    mel_high = 1127.0 * math.log(1.0 + 0.5 * sample_rate / 700.0)
    delta = _f32((mel_high - 1127.0 * math.log(1.0 + _LOW_FREQ / 700.0)) / (num_bins + 1))
    b = np.arange(num_bins, dtype=np.float64)[:, None]
    left = _f32(mel_low + _f32(b * delta))
    center = _f32(mel_low + _f32(_f32(b + 1.0) * delta))
    right = _f32(mel_low + _f32(_f32(b + 2.0) * delta))
    freq = _f32(_f32(sample_rate / fft_size) * np.arange(fft_size // 2, dtype=np.float64))
    mel = _f32(1127.0 * _f32(np.log(_f32(1.0 + _f32(freq / 700.0)))))[None, :]
    up = _f32(_f32(mel - left) / _f32(center - left))
    down = _f32(_f32(right - mel) / _f32(right - center))
    return np.maximum(0.0, np.minimum(up, down)).astype(np.float32)


@functools.lru_cache(maxsize=16)
def _tables(sample_rate: int, num_mel_bins: int, window_size: int,
            fft_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """Povey window (window_size,) and mel matrix (fft_size // 2 + 1, bins), float32."""
    n = np.arange(window_size, dtype=np.float64)
    angle = _f32(n * _f32(2.0 * math.pi / max(window_size - 1, 1)))
    hann = _f32(_f32(np.cos(angle)) * -0.5 + 0.5)  # torch.hann_window(periodic=False)
    window = np.power(hann, 0.85).astype(np.float32)
    mel = mel_banks(num_mel_bins, fft_size, float(sample_rate))
    mel = np.pad(mel, ((0, 0), (0, 1))).T  # the Nyquist bin gets weight 0, as in Kaldi
    window.setflags(write=False)
    mel = np.ascontiguousarray(mel)
    mel.setflags(write=False)
    return window, mel


def fbank(samples: np.ndarray, options: FbankOptions = FbankOptions()) -> np.ndarray:
    """1-D float samples in [-1, 1] at ``options.sample_rate`` → (frames, bins) float32.

    A ValueError when the audio is shorter than one frame (the caller names the input).
    """
    wav = np.asarray(samples, dtype=np.float32).reshape(-1)
    size, shift = options.window_size, options.window_shift
    if wav.size < size:
        raise ValueError(f"{wav.size} samples are fewer than one {size}-sample window")
    fft_size = 1 << (size - 1).bit_length()
    window, mel = _tables(options.sample_rate, options.num_mel_bins, size, fft_size)
    scaled = wav * np.float32(1 << 15)
    frames = np.lib.stride_tricks.sliding_window_view(scaled, size)[::shift]
    frames = frames - frames.mean(axis=1, keepdims=True, dtype=np.float32)
    emphasised = np.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - np.float32(_PREEMPHASIS) * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] * np.float32(1.0 - _PREEMPHASIS)
    emphasised *= window
    spectrum = np.fft.rfft(emphasised, n=fft_size, axis=1)
    power = (spectrum.real.astype(np.float32) ** 2 + spectrum.imag.astype(np.float32) ** 2)
    energies = power @ mel
    return np.log(np.maximum(energies, _EPS)).astype(np.float32)
