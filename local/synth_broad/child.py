"""Child-like voices from adult synthetic speech: every frequency times one factor.

A child's vocal tract is shorter than an adult's, and to a first approximation its
resonances (formants) are the adult ones scaled by the ratio of the lengths; its vocal
folds are shorter and lighter, so F0 is higher too. ``child_shift`` applies one factor
``k`` to both, keeping the duration, in two steps:

1. ``wsola_stretch``: WSOLA (waveform-similarity overlap-add, Verhelst & Roelands 1993)
   makes the signal ``k`` times longer without changing pitch or spectral envelope. Hann
   frames of ``FRAME_MS`` are laid at 50 % overlap on the output; each frame is read from
   the input near its nominal (time-scaled) position, shifted by up to ``SEARCH_MS`` so
   that it correlates best (normalised cross-correlation, through the FFT) with the
   natural continuation of the frame placed before it. Periods are thus copied or
   dropped whole, and the waveform stays periodic across frame joins.
2. band-limited resampling by ``1/k`` (``acoustics.resample_array``): the stretched
   signal, read as if sampled at ``k * rate`` and resampled to ``rate``, is as long as
   the input and has every frequency multiplied by ``k`` (content that would land above
   the Nyquist frequency is removed, not folded back).

Where the factors come from. Peterson & Barney (1952, "Control methods used in a study
of the vowels", JASA 24, 175-184) averaged F0 and F1-F3 of ten English vowels for 33
men, 28 women and 15 children: the children's formants lie about 1.25-1.45 times the
men's and about 1.1-1.25 times the women's (for /a/: men 730, 1090, 2440 Hz; children
1030, 1370, 3170 Hz), their mean F0 about 264 Hz against 132 Hz (men) and 223 Hz
(women). Lee, Potamianos & Narayanan (1999, "Acoustics of children's speech:
developmental changes of temporal and spectral parameters", JASA 105(3), 1455-1468),
measuring 436 children of 5-17 years and 56 adults, found the formant changes with age
to follow a uniform scaling of vocal-tract length, which shrinks steadily towards adult
values until puberty, and children's F0 (both sexes before about 12) well above the
adult female range. Our adult voices are of both sexes, so a child of 6-13 years sits
between 1.15 (an older child against a female voice) and 1.35 (a young child against a
male voice): ``FORMANT_FACTOR_RANGE``. ``F0_RANGE_HZ`` is the children's F0 a generator
should aim at (Peterson & Barney's mean 264 Hz, Lee et al.'s 6-13-year means, with the
spread between speakers around them): as ``child_shift`` multiplies F0 by the same
factor, it should ask the TTS engine for ``target_f0 / factor``.

Limits: the formants of a real child are not exactly a uniform scaling (the pharynx
grows more than the mouth), and WSOLA smears fast transitions (plosive bursts) a little.
"""
from __future__ import annotations

import random
from typing import Dict

import numpy as np

from local.synth_broad.acoustics import resample_array

FORMANT_FACTOR_RANGE = (1.15, 1.35)   # draw_child: child / adult formant (and F0) ratio
FACTOR_LIMITS = (1.0, 1.6)            # child_shift accepts factors in this closed interval
F0_RANGE_HZ = (200.0, 300.0)          # children of 6-13 years (see the module docstring)
FRAME_MS = 25.0                       # WSOLA frame; the hop is half of it
SEARCH_MS = 10.0                      # WSOLA: +- this much around the nominal position


def _frame_positions(x_pad: np.ndarray, nominal: np.ndarray, frame: int, search: int) -> np.ndarray:
    """Start of every WSOLA frame in ``x_pad``: frame 0 at its nominal start, frame k at
    ``nominal[k] + d`` (|d| <= search) whose normalised cross-correlation with the
    continuation of frame k-1 (``frame // 2`` samples after its start) is largest."""
    hop, lags = frame // 2, 2 * search + 1
    size = 1 << (frame + 2 * search - 1).bit_length()
    span = nominal[:, None] - search + np.arange(frame + 2 * search)
    regions = np.fft.rfft(x_pad[span], size, axis=1)
    energy = np.concatenate(([0.0], np.cumsum(x_pad ** 2)))
    starts = nominal[:, None] - search + np.arange(lags)
    window_energy = energy[starts + frame] - energy[starts]
    floor = 1e-9 * energy[-1] / len(x_pad) * frame + 1e-300
    weight = 1.0 / np.sqrt(window_energy + floor)
    positions = nominal.copy()
    for k in range(1, len(nominal)):
        follow = positions[k - 1] + hop
        template = np.fft.rfft(x_pad[follow:follow + frame], size)
        corr = np.fft.irfft(regions[k] * np.conj(template), size)[:lags]
        positions[k] = nominal[k] - search + int(np.argmax(corr * weight[k]))
    return positions


def wsola_stretch(x: np.ndarray, factor: float, rate: int) -> np.ndarray:
    """``x`` (1-D) played ``factor`` times slower with the same pitch and spectral
    envelope, by WSOLA (see the module docstring); float64, ``round(len(x) * factor)``
    samples long. ``factor`` 1.0 returns a copy."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"wsola_stretch: x must be 1-D, got shape {x.shape}")
    if not factor > 0:
        raise ValueError(f"wsola_stretch: factor must be positive, got {factor!r}")
    length = int(round(len(x) * factor))
    if factor == 1.0 or len(x) == 0:
        return x.copy() if factor == 1.0 else np.zeros(length)
    frame = 2 * max(1, int(round(rate * FRAME_MS / 2000)))
    hop, search = frame // 2, max(1, int(round(rate * SEARCH_MS / 1000)))
    count = -(-length // hop) + 1          # output frames, covering [hop, hop + length)
    nominal = np.round(np.arange(count) * hop / factor).astype(np.int64) + search
    lead = hop + search                    # x starts at this index of the padded input
    tail = max(0, int(nominal[-1]) + 2 * search + frame + hop - lead - len(x))
    x_pad = np.concatenate((np.zeros(lead), x, np.zeros(tail)))
    positions = _frame_positions(x_pad, nominal, frame, search)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)  # periodic Hann
    frames = x_pad[positions[:, None] + np.arange(frame)] * window
    out = np.zeros((count + 1, hop))       # 50 % overlap-add, block by block
    out[:-1] += frames[:, :hop]
    out[1:] += frames[:, hop:]
    return out.reshape(-1)[hop:hop + length]


def child_shift(x: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """``x`` (1-D, sampled at ``rate``) with its spectral envelope and F0 multiplied by
    ``factor`` and its duration kept: WSOLA-stretched by ``factor``, then resampled by
    ``1 / factor``; float64, exactly ``len(x)`` samples. The factor applied is
    ``round(rate * factor) / rate`` (``factor`` itself when it has 3 decimals and
    ``rate`` is a multiple of 1000). ``factor`` must lie in ``FACTOR_LIMITS``; 1.0
    returns a copy of ``x``."""
    if not FACTOR_LIMITS[0] <= factor <= FACTOR_LIMITS[1]:
        raise ValueError(f"child_shift: factor must lie in [{FACTOR_LIMITS[0]}, "
                         f"{FACTOR_LIMITS[1]}], got {factor!r}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"child_shift: x must be 1-D, got shape {x.shape}")
    scaled_rate = int(round(rate * factor))
    if scaled_rate == rate or len(x) == 0:
        return x.copy()
    stretched = wsola_stretch(x, scaled_rate / rate, rate)
    shifted = resample_array(stretched, scaled_rate, rate)
    out = np.zeros(len(x))
    kept = min(len(x), len(shifted))
    out[:kept] = shifted[:kept]
    return out


def draw_child(rng: random.Random) -> Dict[str, float]:
    """One child voice: ``{"formant_factor": f}``, ``f`` uniform in
    ``FORMANT_FACTOR_RANGE`` rounded to 3 decimals (one ``rng.uniform`` draw)."""
    return {"formant_factor": round(rng.uniform(*FORMANT_FACTOR_RANGE), 3)}
