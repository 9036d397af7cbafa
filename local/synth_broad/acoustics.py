"""Room, noise and channel simulation for the broad corpus (numpy; 16 kHz float).

Each function does one kind, from explicit parameters, so a manifest record
reproduces its audio exactly:

* ``polack_rir`` / ``reverberate``: a room impulse response after Polack's
  statistical model: a direct-path impulse, then, from the first reflection on,
  Gaussian noise under an exponential envelope whose energy falls 60 dB in
  ``rt60`` seconds, scaled to a direct-to-reverberant ratio. Why this and not an
  image-source model (or pyroomacoustics): what a recogniser must learn to ignore
  is the late reverberation's smearing and its level against the direct sound;
  this model sets both exactly (RT60 and DRR are its parameters, not outcomes of a
  sampled room geometry and Sabine's formula), costs one noise draw, and needs no
  new dependency. Early reflections are not modelled one by one, and the decay is
  the same in every frequency band.
* ``mix_at_snr`` with ``local.synth.augment.coloured_noise`` or ``babble``
  (a few other utterances of the corpus summed at equal power).
* ``band_limit``: a linear-phase FIR band-pass (Kaiser-windowed sinc) whose stop
  bands start at the given edges (>= 70 dB down there): microphones, loudspeakers
  and codecs that drop the highs and lows.
* ``telephone``: 16 kHz -> band-limit -> 8 kHz -> 8-bit mu-law (G.711-like, the
  continuous companding law) -> 16 kHz (decimation and interpolation by 2 through
  the same FIR, so nothing above 3.8 kHz comes back).
* ``set_level``: scale to an RMS level in dBFS; what exceeds full scale clips
  when written as int16 (loud recordings clip too).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

from wenet.dataset.audio import resample

RATE = 16000
TRANSITION_HZ = 250.0     # band_limit: width of each transition band
STOPBAND_DB = 70.0        # band_limit: attenuation in the stop bands
FIRST_REFLECTION_MS = 2.5  # polack_rir: the tail starts this long after the direct path
TELEPHONE_RATE = 8000
TELEPHONE_BAND = (100.0, 3800.0)  # stop-band edges at 16 kHz before decimation to 8 kHz
MU = 255


def fft_convolve(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Full linear convolution (length len(x) + len(h) - 1) through the FFT."""
    n = len(x) + len(h) - 1
    size = 1 << max(1, (n - 1).bit_length())
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[:n]


def polack_rir(rt60: float, drr_db: float, rng: np.random.Generator,
               rate: int = RATE) -> np.ndarray:
    """An impulse response: 1 at sample 0 (the direct path), then a noise tail whose
    energy envelope decays 60 dB per ``rt60`` s, holding 10^(-drr_db/10) of the direct
    energy; ``rt60`` s long (the tail is 60 dB down at its end)."""
    if rt60 <= 0:
        raise ValueError(f"rt60 must be positive, got {rt60}")
    n = max(int(round(rt60 * rate)), 2)
    start = min(max(1, int(round(FIRST_REFLECTION_MS * rate / 1000))), n - 1)
    t = np.arange(n - start) / rate
    tail = rng.standard_normal(n - start) * 10.0 ** (-3.0 * t / rt60)
    tail *= math.sqrt(10.0 ** (-drr_db / 10.0) / float(np.sum(tail ** 2)))
    h = np.zeros(n)
    h[0] = 1.0
    h[start:] = tail
    return h


def reverberate(x: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """``x`` through the room, as long as ``x`` (the direct path stays in place; the
    tail past the end is cut, as the recording stops)."""
    return fft_convolve(x, rir)[:len(x)]


def mix_at_snr(signal: np.ndarray, noise: np.ndarray, snr_db: float,
               signal_power: Optional[float] = None) -> np.ndarray:
    """``signal`` + ``noise`` scaled so that signal power / noise power = ``snr_db``.
    ``signal_power`` defaults to the mean power of ``signal`` (pass the power of the
    speech alone when ``signal`` carries silent padding)."""
    if len(noise) != len(signal):
        raise ValueError(f"noise has {len(noise)} samples, signal {len(signal)}")
    p_signal = float(np.mean(signal ** 2)) if signal_power is None else signal_power
    p_noise = float(np.mean(noise ** 2))
    if p_signal <= 0 or p_noise <= 0:
        raise ValueError("signal or noise is silent")
    scale = math.sqrt(p_signal / (p_noise * 10.0 ** (snr_db / 10.0)))
    return signal + scale * noise


def babble(talkers: Sequence[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of unit-power babble: each talker's signal repeated to ``n``
    samples from a random offset, scaled to unit power, then summed."""
    if not talkers:
        raise ValueError("babble needs at least one talker")
    out = np.zeros(n)
    for wav in talkers:
        reps = -(-(n + len(wav)) // len(wav))
        offset = int(rng.integers(len(wav)))
        seg = np.tile(wav, reps)[offset:offset + n]
        out += seg / math.sqrt(max(float(np.mean(seg ** 2)), 1e-20))
    return out / math.sqrt(float(np.mean(out ** 2)))


def _kaiser_lowpass(cutoff_hz: float, rate: int, taps: int, beta: float) -> np.ndarray:
    k = np.arange(taps) - (taps - 1) / 2
    return 2 * cutoff_hz / rate * np.sinc(2 * cutoff_hz / rate * k) * np.kaiser(taps, beta)


def band_pass_filter(low_hz: float, high_hz: float, rate: int = RATE) -> np.ndarray:
    """FIR taps passing [low_hz + T, high_hz - T] (T = TRANSITION_HZ) and stopping
    below ``low_hz`` and above ``high_hz`` (low_hz <= 0: no high-pass)."""
    if not (high_hz <= rate / 2 and high_hz - TRANSITION_HZ > max(low_hz, 0) + TRANSITION_HZ):
        raise ValueError(f"band {low_hz}..{high_hz} Hz is too narrow or above {rate / 2} Hz")
    beta = 0.1102 * (STOPBAND_DB - 8.7)
    width = 2 * math.pi * TRANSITION_HZ / rate
    taps = int(math.ceil((STOPBAND_DB - 7.95) / (2.285 * width))) | 1
    h = _kaiser_lowpass(high_hz - TRANSITION_HZ / 2, rate, taps, beta)
    if low_hz > 0:
        h -= _kaiser_lowpass(low_hz + TRANSITION_HZ / 2, rate, taps, beta)
    return h


def band_limit(x: np.ndarray, low_hz: float, high_hz: float, rate: int = RATE) -> np.ndarray:
    """``x`` through ``band_pass_filter`` (zero-phase alignment: same length, no delay)."""
    h = band_pass_filter(low_hz, high_hz, rate)
    delay = (len(h) - 1) // 2
    return fft_convolve(x, h)[delay:delay + len(x)]


def mu_law_encode(x: np.ndarray, mu: int = MU) -> np.ndarray:
    """[-1, 1] -> integer codes 0..mu (values outside [-1, 1] clip)."""
    x = np.clip(x, -1.0, 1.0)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / math.log1p(mu)
    return np.floor((y + 1) / 2 * mu + 0.5).astype(np.int64)


def mu_law_decode(codes: np.ndarray, mu: int = MU) -> np.ndarray:
    """Codes 0..mu -> [-1, 1], the inverse companding of ``mu_law_encode``."""
    y = 2 * codes.astype(np.float64) / mu - 1
    return np.sign(y) * np.expm1(np.abs(y) * math.log1p(mu)) / mu


def resample_array(x: np.ndarray, orig: int, new: int) -> np.ndarray:
    """Band-limited resampling of a float array (wenet.dataset.audio.resample)."""
    out = resample(torch.from_numpy(x.astype(np.float32))[None, :], orig, new)[0]
    return out.numpy().astype(np.float64)


def telephone(x: np.ndarray) -> np.ndarray:
    """A narrow-band telephone channel on 16 kHz audio: band-limited to the
    ``TELEPHONE_BAND`` stop edges, decimated to 8 kHz, 8-bit mu-law coded and
    decoded, interpolated back to 16 kHz (zeros between the samples, then the
    same FIR low-pass at 3.8 kHz removes the images); as long as ``x``."""
    narrow = band_limit(x, *TELEPHONE_BAND)[::RATE // TELEPHONE_RATE]
    coded = mu_law_decode(mu_law_encode(narrow))
    wide = np.zeros(len(x))
    wide[::RATE // TELEPHONE_RATE] = coded
    return band_limit(wide, 0.0, TELEPHONE_BAND[1]) * (RATE // TELEPHONE_RATE)


def rms_dbfs(x: np.ndarray) -> float:
    """RMS level in dB relative to full scale (1.0)."""
    return 10 * math.log10(max(float(np.mean(x ** 2)), 1e-30))


def set_level(x: np.ndarray, level_dbfs: float) -> np.ndarray:
    """``x`` scaled to an RMS level of ``level_dbfs``."""
    return x * 10.0 ** ((level_dbfs - rms_dbfs(x)) / 20.0)


def set_peak(x: np.ndarray, peak: float) -> np.ndarray:
    """``x`` scaled to an absolute peak of ``peak``."""
    return x * (peak / float(np.max(np.abs(x))))


def to_int16(x: np.ndarray) -> np.ndarray:
    """Full scale 1.0 -> int16; what exceeds full scale clips."""
    return np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)
