"""Each simulation kind of the broad corpus (local/synth_broad/acoustics.py, simulate.py)
measured against its specification: RT60 by Schroeder integration and by interrupted
noise, DRR, SNR, band-limits, mu-law against torchaudio, telephone band, gain."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torchaudio

from local.synth.augment import coloured_noise
from local.synth_broad import acoustics
from local.synth_broad.simulate import apply_simulation, parse_simulation

RATE = 16000


def _decay_rt60(level_db: np.ndarray, times: np.ndarray, start_db: float) -> float:
    """RT60 from a decay curve: a least-squares line through the points between
    ``start_db`` - 5 dB and ``start_db`` - 25 dB (T20), extrapolated to 60 dB."""
    sel = (level_db <= start_db - 5) & (level_db >= start_db - 25)
    slope = np.polyfit(times[sel], level_db[sel], 1)[0]
    return -60.0 / slope


def _schroeder_db(h: np.ndarray) -> np.ndarray:
    energy = np.cumsum((h ** 2)[::-1])[::-1]
    return 10 * np.log10(energy / energy[0])


@pytest.mark.parametrize("rt60", [0.25, 0.5, 0.8])
@pytest.mark.parametrize("drr_db", [0.0, 6.0, 12.0])
def test_rir_schroeder_decay_gives_the_requested_rt60(rt60, drr_db):
    h = acoustics.polack_rir(rt60, drr_db, np.random.default_rng(1))
    edc = _schroeder_db(h)
    t = np.arange(len(h)) / RATE
    # the decay starts after the direct path (ISO 3382: evaluation from 5 dB below it)
    measured = _decay_rt60(edc[1:], t[1:], edc[1])
    assert abs(measured - rt60) / rt60 < 0.2, (rt60, drr_db, measured)
    # direct-to-reverberant energy ratio, exactly
    assert 10 * math.log10(h[0] ** 2 / np.sum(h[1:] ** 2)) == pytest.approx(drr_db, abs=1e-9)


@pytest.mark.parametrize("rt60", [0.3, 0.7])
def test_reverberated_noise_decays_at_the_requested_rt60(rt60):
    """Interrupted-noise method on reverberate()'s output: white noise stops at 1 s; the
    output's energy (averaged over 8 noise draws, 10 ms windows) decays at the RT60."""
    n_on, win = RATE, RATE // 100
    energy = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        h = acoustics.polack_rir(rt60, 3.0, rng)
        x = np.concatenate([rng.standard_normal(n_on), np.zeros(RATE)])
        y = acoustics.reverberate(x, h)
        assert len(y) == len(x)
        energy = energy + (y[n_on:] ** 2)[: (RATE // win) * win].reshape(-1, win).mean(axis=1)
    level = 10 * np.log10(energy / 8)
    times = (np.arange(len(level)) + 0.5) * win / RATE
    measured = _decay_rt60(level, times, level[0])
    assert abs(measured - rt60) / rt60 < 0.2, (rt60, measured)


@pytest.mark.parametrize("kind", ["white", "pink", "brown", "babble"])
@pytest.mark.parametrize("snr_db", [0.0, 10.0, 25.0])
def test_mix_at_snr_measured_snr_matches_target(kind, snr_db):
    rng = np.random.default_rng(3)
    n, lead, tail = 3 * RATE, 4000, 2000
    t = np.arange(n) / RATE
    speech = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    padded = np.concatenate([np.zeros(lead), speech, np.zeros(tail)])
    if kind == "babble":
        talkers = [0.2 * np.sin(2 * np.pi * f * np.arange(RATE + 37 * i) / RATE)
                   for i, f in enumerate((150, 310, 470))]
        noise = acoustics.babble(talkers, len(padded), rng)
    else:
        noise = coloured_noise(len(padded), kind, rng)
    out = acoustics.mix_at_snr(padded, noise, snr_db, float(np.mean(speech ** 2)))
    added = out - padded
    measured = 10 * math.log10(np.mean(speech ** 2) / np.mean(added ** 2))
    assert abs(measured - snr_db) < 1.0, measured


def test_babble_is_unit_power_sum_of_the_talkers():
    # whole numbers of periods, so a talker repeated from any offset stays one pure tone
    talkers = [np.sin(2 * np.pi * 300 * np.arange(8000) / RATE),
               0.01 * np.sin(2 * np.pi * 1000 * np.arange(4000) / RATE)]
    b = acoustics.babble(talkers, 20000, np.random.default_rng(0))
    assert np.mean(b ** 2) == pytest.approx(1.0, rel=1e-9)
    spec = np.abs(np.fft.rfft(b)) ** 2
    freqs = np.fft.rfftfreq(len(b), 1 / RATE)
    p300 = spec[np.abs(freqs - 300) < 5].sum()
    p1000 = spec[np.abs(freqs - 1000) < 5].sum()
    assert p300 / p1000 == pytest.approx(1.0, rel=0.01)  # each talker at equal power
    assert (p300 + p1000) / spec.sum() > 0.99


@pytest.mark.parametrize("low, high", [(0.0, 4000.0), (200.0, 6000.0), (120.0, 3000.0)])
def test_band_limit_removes_energy_outside_the_band(low, high):
    h = acoustics.band_pass_filter(low, high)
    resp = 20 * np.log10(np.abs(np.fft.rfft(h, 1 << 16)) + 1e-30)
    freqs = np.fft.rfftfreq(1 << 16, 1 / RATE)
    assert resp[freqs >= high].max() < -60
    if low > 0:
        assert resp[freqs <= low].max() < -60
    passband = (freqs >= low + acoustics.TRANSITION_HZ) & (freqs <= high - acoustics.TRANSITION_HZ)
    assert np.abs(resp[passband]).max() < 0.05
    # on a signal: white noise keeps its in-band power, loses what lies above the cut-off
    x = np.random.default_rng(0).standard_normal(4 * RATE)
    y = acoustics.band_limit(x, low, high)
    assert len(y) == len(x)
    # spectra of the steady part (the filter's length cut from both ends), Hann-windowed
    # so that the window's own leakage stays far below the stop band
    steady = slice(len(h), len(x) - len(h))
    window = np.hanning(steady.stop - steady.start)
    px, py = (np.abs(np.fft.rfft(v[steady] * window)) ** 2 for v in (x, y))
    fx = np.fft.rfftfreq(steady.stop - steady.start, 1 / RATE)
    above = fx >= high
    assert 10 * np.log10(py[above].sum() / px[above].sum()) < -60
    inband = (fx >= low + acoustics.TRANSITION_HZ) & (fx <= high - acoustics.TRANSITION_HZ)
    assert 10 * np.log10(py[inband].sum() / px[inband].sum()) == pytest.approx(0.0, abs=0.1)


def test_band_limit_keeps_timing_of_a_click():
    x = np.zeros(4000)
    x[2000] = 1.0
    y = acoustics.band_limit(x, 0.0, 5000.0)
    assert int(np.argmax(np.abs(y))) == 2000  # linear phase, delay removed


def test_mu_law_matches_torchaudio_and_round_trips():
    x = np.linspace(-1.2, 1.2, 20001)
    codes = acoustics.mu_law_encode(x)
    ref = torchaudio.functional.mu_law_encoding(torch.from_numpy(np.clip(x, -1, 1)), 256)
    np.testing.assert_array_equal(codes, ref.numpy())
    assert codes.min() == 0 and codes.max() == 255
    decoded = acoustics.mu_law_decode(codes)
    ref_dec = torchaudio.functional.mu_law_decoding(torch.from_numpy(codes), 256).numpy()
    np.testing.assert_allclose(decoded, ref_dec, atol=1e-6)
    # 8-bit mu-law keeps ~38 dB SNR over a wide range of levels (G.711's design aim)
    tone = np.sin(2 * np.pi * 1000 * np.arange(RATE) / RATE)
    for amp in (0.9, 0.1, 0.01):
        y = acoustics.mu_law_decode(acoustics.mu_law_encode(amp * tone))
        snr = 10 * math.log10(np.mean((amp * tone) ** 2) / np.mean((y - amp * tone) ** 2))
        assert snr > 33, (amp, snr)


def test_telephone_is_8khz_band_limited_and_keeps_speech_band():
    t = np.arange(2 * RATE) / RATE
    tone = 0.3 * np.sin(2 * np.pi * 1000 * t)
    out = acoustics.telephone(tone)
    assert len(out) == len(tone)
    mid = slice(RATE // 2, 3 * RATE // 2)  # away from the resampler's edges
    gain_db = 10 * math.log10(np.mean(out[mid] ** 2) / np.mean(tone[mid] ** 2))
    assert abs(gain_db) < 0.5
    # white noise: nothing survives above the 8 kHz channel's Nyquist frequency
    x = 0.1 * np.random.default_rng(0).standard_normal(2 * RATE)
    y = acoustics.telephone(x)
    spec = np.abs(np.fft.rfft(y)) ** 2
    freqs = np.fft.rfftfreq(len(y), 1 / RATE)
    assert 10 * np.log10(spec[freqs > 4100].sum() / spec.sum()) < -40
    # and the highs of the input (4-8 kHz) are gone: a 6 kHz tone is silenced
    hi = acoustics.telephone(0.3 * np.sin(2 * np.pi * 6000 * t))
    assert 10 * math.log10(np.mean(hi[mid] ** 2) / np.mean(tone[mid] ** 2)) < -40


def test_gain_sets_rms_level_and_int16_clips():
    x = 0.1 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE)
    for level in (-38.0, -20.0, -16.0):
        assert acoustics.rms_dbfs(acoustics.set_level(x, level)) == pytest.approx(level, abs=1e-9)
    loud = acoustics.set_level(x, 0.0)  # a sine at 0 dBFS RMS peaks at 1.41: it clips
    pcm = acoustics.to_int16(loud)
    assert pcm.max() == 32767 and pcm.min() == -32767
    assert np.mean(np.abs(pcm) == 32767) > 0.3
    quiet = acoustics.to_int16(acoustics.set_level(x, -30.0))
    expected = np.round(x * 10 ** ((-30.0 - acoustics.rms_dbfs(x)) / 20) * 32767)
    np.testing.assert_array_equal(quiet, expected.astype(np.int16))


def _record_sim(**changes):
    sim = {"pad_ms": [100, 50], "rir": None, "noise": None, "channel": None,
           "level": {"kind": "peak", "peak": 0.5}}
    sim.update(changes)
    return sim


def test_apply_simulation_without_kinds_pads_and_normalises_only():
    speech = 0.2 * np.sin(2 * np.pi * 300 * np.arange(8000) / RATE)
    out = apply_simulation(speech, _record_sim())
    padded = np.concatenate([np.zeros(1600), speech, np.zeros(800)])
    np.testing.assert_array_equal(out, np.round(padded * 0.5 / 0.2 * 32767).astype(np.int16))


def test_apply_simulation_noise_at_target_snr_and_level():
    speech = 0.2 * np.sin(2 * np.pi * 300 * np.arange(16000) / RATE)
    noise = {"kind": "pink", "snr_db": 12.0, "seed": 5, "talkers": []}
    out = apply_simulation(speech, _record_sim(noise=noise, level={"kind": "gain", "dbfs": -26.0}))
    out = out.astype(np.float64) / 32767
    padded = np.concatenate([np.zeros(1600), speech, np.zeros(800)])
    ref_noise = coloured_noise(len(padded), "pink", np.random.default_rng(5))
    (a, b), *_ = np.linalg.lstsq(np.stack([padded, ref_noise], 1), out, rcond=None)
    snr = 10 * math.log10(a ** 2 * np.mean(speech ** 2) / (b ** 2 * np.mean(ref_noise ** 2)))
    assert abs(snr - 12.0) < 1.0, snr
    assert acoustics.rms_dbfs(out) == pytest.approx(-26.0, abs=0.01)


def test_parse_simulation():
    assert parse_simulation("none") == {k: 0.0 for k in parse_simulation("none")}
    default = parse_simulation("default")
    assert default["rir"] == 0.5 and default["gain"] == 1.0
    assert parse_simulation("default,babble=0")["babble"] == 0.0
    assert parse_simulation("default,babble=0")["rir"] == 0.5
    assert parse_simulation("rir=0.3") == {**parse_simulation("none"), "rir": 0.3}
    for bad in ("reverb=0.5", "rir=1.5", "rir=x", "noise=0.7,babble=0.5", "rir"):
        with pytest.raises(ValueError, match="simulation"):
            parse_simulation(bad)
