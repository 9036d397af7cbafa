"""The runtime's numpy fbank equals the training features (``compute_fbank``) and
torchaudio's Kaldi fbank.

Tolerance: the mel tables are computed operation by operation as torchaudio does, in
float32 with a correctly rounded ``log``; they are bit-identical wherever torch's float32
``log`` of a frequency's ``1 + f / 700`` is correctly rounded too (on the Intel Xeon
development machine everywhere; on an AVX2-only AMD EPYC torch's log is one ulp off on
~5 % of inputs, which moves a weight by up to 1127 * ulp(log) / (mel bin width) ~ 1e-5). The features differ by that
and by float32 FFT rounding, and torch's float32 FFT is the less exact one (its power
error is ~1.6e-7 of the frame's peak power; numpy's float32 FFT stays within 7e-8 of
float64). So the mel energies agree within 2e-5 of the frame's largest energy (5e-6 on
the Xeon, 5.7e-6 seen on the EPYC; the float32 log itself rounds a log energy near 20 to
1.9e-6 relative), and the log features within 1e-3
absolute in every bin within 30 dB of its frame's largest (worst seen 3.8e-4, in the low
bins of an 8 kHz 80-bin fbank of white noise; 1.2e-4 at 16 kHz). Bins far below their
frame's peak carry torch's FFT error relatively magnified (1.7e-3 in the log seen 60 dB
down); digital silence gives the same floor, log(eps).
"""
import numpy as np
import pytest
import torch
import torchaudio.compliance.kaldi as kaldi

from wenet.dataset.fbank import compute_fbank
from wenet.runtime.fbank import FbankOptions, fbank, mel_banks

LOG_TOL = 1e-3
ENERGY_TOL = 2e-5  # of the frame's largest mel energy (module docstring)
MEL_TOL = 2e-5    # mel weights where the two float32 logs round differently


def _speech_like(n: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Voiced segments (a 120-220 Hz harmonic series under two formant peaks, syllable
    envelope), a stretch of digital silence, and low noise: what speech looks like to fbank."""
    t = np.arange(n) / rate
    f0 = 120 + 100 * (0.5 + 0.5 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = np.zeros(n)
    for h in range(1, 30):
        freq = h * f0
        gain = np.exp(-((freq - 700) / 300) ** 2) + 0.5 * np.exp(-((freq - 1800) / 400) ** 2)
        voiced += np.where(freq < rate / 2, gain, 0.0) * np.sin(h * phase)
    envelope = np.clip(np.sin(2 * np.pi * 3 * t), 0, None) ** 2
    wav = 0.2 * voiced * envelope + 0.003 * rng.standard_normal(n)
    wav[n // 3: n // 3 + n // 10] = 0.0  # digital silence: the log(eps) floor
    return wav.astype(np.float32)


def _check(wav: np.ndarray, opts: FbankOptions) -> None:
    ours = fbank(wav, opts)
    kwargs = dict(num_mel_bins=opts.num_mel_bins, frame_length=opts.frame_length,
                  frame_shift=opts.frame_shift)
    train = compute_fbank(torch.from_numpy(wav)[None], opts.sample_rate, **kwargs).numpy()
    ta = kaldi.fbank(torch.from_numpy(wav)[None] * 32768, sample_frequency=opts.sample_rate,
                     dither=0.0, **kwargs).numpy()
    assert ours.dtype == np.float32
    assert ours.shape == train.shape == ta.shape == (opts.num_frames(wav.size),
                                                     opts.num_mel_bins)
    for ref in (train, ta):
        energy, ref_energy = np.exp(ours.astype(np.float64)), np.exp(ref.astype(np.float64))
        scale = ref_energy.max(axis=1, keepdims=True)
        assert (np.abs(energy - ref_energy) / scale).max() < ENERGY_TOL
        loud = ref_energy >= scale * 1e-3
        np.testing.assert_allclose(ours[loud], ref[loud], rtol=0, atol=LOG_TOL)
        assert loud.mean() > 0.5  # most bins are checked in the log domain too
        floor = ref == np.log(np.finfo(np.float32).eps)
        assert np.array_equal(ours[floor], ref[floor])


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
@pytest.mark.parametrize("bins", [20, 80])
def test_speech_like_audio_equals_training_features(rate, bins):
    rng = np.random.default_rng(rate + bins)
    opts = FbankOptions(rate, bins)
    for seconds in (0.025, 0.4, 1.73):
        _check(_speech_like(max(opts.window_size, int(rate * seconds)), rate, rng), opts)


@pytest.mark.parametrize("rate,bins,length,shift", [
    (16000, 80, 25.0, 10.0), (8000, 80, 25.0, 10.0), (16000, 40, 20.0, 5.0),
    (22050, 64, 32.0, 12.0)])
def test_random_audio_equals_training_features(rate, bins, length, shift):
    rng = np.random.default_rng(1)
    opts = FbankOptions(rate, bins, length, shift)
    for n in (opts.window_size, opts.window_size + opts.window_shift - 1, 12345):
        _check(rng.uniform(-1, 1, n).astype(np.float32), opts)
        _check((rng.integers(-3, 4, n) / 32768).astype(np.float32), opts)  # near silence


@pytest.mark.parametrize("rate,bins", [(8000, 80), (16000, 80), (16000, 23), (44100, 80)])
def test_mel_banks_equal_torchaudios(rate, bins):
    """Bit-identical in every FFT bin where torch's float32 log rounds as the correctly
    rounded one mel_banks uses; within MEL_TOL in the others (module docstring)."""
    size = int(rate * 0.025)
    fft = 1 << (size - 1).bit_length()
    ref, _ = kaldi.get_mel_banks(bins, fft, float(rate), 20.0, 0.0, 100.0, -500.0, 1.0)
    ours, ref = mel_banks(bins, fft, float(rate)), ref.numpy()
    f32 = np.float32
    freq = (f32(rate / fft) * np.arange(fft // 2, dtype=np.float64)).astype(f32)
    arg = (1.0 + (freq / 700.0).astype(f32)).astype(f32)
    exact = np.log(arg.astype(np.float64)).astype(f32)  # mel_banks' log: correctly rounded
    same = exact == torch.log(torch.from_numpy(arg)).numpy()
    assert same.mean() > 0.5
    assert np.array_equal(ours[:, same], ref[:, same])
    assert np.abs(ours - ref).max() <= MEL_TOL


def test_audio_shorter_than_a_frame_is_refused():
    opts = FbankOptions()
    with pytest.raises(ValueError, match="fewer than one 400-sample window"):
        fbank(np.zeros(399, dtype=np.float32), opts)
    assert opts.num_frames(399) == 0 and opts.num_frames(400) == 1 and opts.num_frames(560) == 2
