"""Light, deterministic augmentation of engine output.

Speed perturbation by resampling, silence padding, coloured additive noise at
a chosen SNR and a peak level, all from explicit parameters so one utterance's
record reproduces its audio exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from wenet.dataset.audio import resample

TARGET_RATE = 16000
NOISE_COLOURS = ("white", "pink", "brown")
# resampling rates are multiples of this, so that torchaudio's polyphase filter
# (built for orig/gcd x new/gcd phases) stays small
RATE_QUANTUM = 100


@dataclass(frozen=True)
class AugmentParams:
    """What to do to one utterance.

    ``speed``: > 1 is faster (shorter). ``pad_ms``: silence before and after.
    ``snr_db``: speech-to-noise power ratio. ``peak``: final absolute peak in
    [0, 1]. ``noise_seed``: seeds the noise generator.
    """

    speed: float
    pad_ms: tuple
    noise: str
    snr_db: float
    peak: float
    noise_seed: int


def speed_rates(native_rate: int, speed: float) -> tuple:
    """(orig, new) resampling rates that play ``native_rate`` audio ``speed`` times
    faster at 16 kHz; orig is rounded to a multiple of RATE_QUANTUM."""
    orig = int(round(native_rate * speed / RATE_QUANTUM)) * RATE_QUANTUM
    return orig, TARGET_RATE


def coloured_noise(n: int, colour: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of unit-power noise with a 1/f^a power spectrum:
    white a=0, pink a=1, brown a=2 (shaped in the frequency domain)."""
    if colour not in NOISE_COLOURS:
        raise ValueError(f"unknown noise colour {colour!r}; expected one of {NOISE_COLOURS}")
    white = rng.standard_normal(n)
    if colour == "white" or n < 4:
        noise = white
    else:
        alpha = 1.0 if colour == "pink" else 2.0
        spec = np.fft.rfft(white)
        freqs = np.fft.rfftfreq(n)
        # flatten below ~20 Hz at 16 kHz so brown noise is not a DC drift
        scale = np.maximum(freqs, 20.0 / TARGET_RATE) ** (-alpha / 2.0)
        noise = np.fft.irfft(spec * scale, n)
    noise = noise - noise.mean()
    power = float(np.mean(noise ** 2))
    return noise / np.sqrt(power) if power > 0 else noise


def trim_to_speech(samples: np.ndarray, rate: int, trim_db: float = 50.0) -> np.ndarray:
    """``samples`` from the first to the last 10 ms window whose energy is within
    ``trim_db`` of the loudest window's (an engine's leading/trailing silence cut off)."""
    win = max(1, rate // 100)
    n = len(samples) // win
    if n == 0:
        return samples
    energy = (np.asarray(samples[: n * win], dtype=np.float64).reshape(n, win) ** 2).mean(axis=1)
    if energy.max() <= 0:
        return samples
    loud = np.nonzero(energy >= energy.max() * 10 ** (-trim_db / 10))[0]
    return samples[loud[0] * win: (loud[-1] + 1) * win]


def augment(samples: np.ndarray, native_rate: int, params: AugmentParams) -> np.ndarray:
    """Engine output (float in [-1, 1] at ``native_rate``) → int16 samples at 16 kHz."""
    orig, new = speed_rates(native_rate, params.speed)
    wav = resample(torch.from_numpy(samples.astype(np.float32))[None, :], orig, new)[0].numpy()
    wav = wav.astype(np.float64)
    speech_power = float(np.mean(wav ** 2))
    if speech_power <= 0:
        raise ValueError("engine produced silence")
    lead = int(params.pad_ms[0] * TARGET_RATE / 1000)
    tail = int(params.pad_ms[1] * TARGET_RATE / 1000)
    wav = np.concatenate([np.zeros(lead), wav, np.zeros(tail)])
    rng = np.random.default_rng(params.noise_seed)
    noise = coloured_noise(len(wav), params.noise, rng)
    noise *= np.sqrt(speech_power / (10.0 ** (params.snr_db / 10.0)))
    wav = wav + noise
    wav *= params.peak / float(np.max(np.abs(wav)))
    return np.round(wav * 32767.0).astype(np.int16)
