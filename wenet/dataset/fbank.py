"""Kaldi-compatible log-mel filterbank features, one definition for CMVN and training."""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
import torchaudio.compliance.kaldi as kaldi

_PREEMPHASIS = 0.97  # Kaldi's default preemphasis coefficient
_ENERGY_FLOOR = torch.finfo(torch.float32).eps  # every mel energy is at least this
SILENCE_LOG_MEL = math.log(_ENERGY_FLOOR)  # so digital silence is this in every bin


@dataclass(frozen=True)
class FeatureConf:
    """The feature options of a config: the one reader of ``dataset_conf.fbank_conf``
    (and ``resample_conf``), so the defaults below are stated once."""

    num_mel_bins: int = 80
    frame_length: float = 25.0   # ms
    frame_shift: float = 10.0    # ms
    dither: float = 0.0
    resample_rate: Optional[int] = None

    @classmethod
    def from_dataset_conf(cls, dataset_conf: Optional[Mapping[str, Any]],
                          name: Optional[str] = None) -> "FeatureConf":
        """Read ``fbank_conf`` / ``resample_conf`` of a ``dataset_conf`` section; with
        ``name`` (the config's file name) a missing ``fbank_conf`` is logged."""
        dataset_conf = dataset_conf or {}
        fbank_conf = dataset_conf.get("fbank_conf")
        if fbank_conf is None and name is not None:
            logging.warning("%s has no dataset_conf.fbank_conf; using %d bins, %g ms / %g ms",
                            name, cls.num_mel_bins, cls.frame_length, cls.frame_shift)
        fbank_conf = fbank_conf or {}
        rate = (dataset_conf.get("resample_conf") or {}).get("resample_rate")
        return cls(num_mel_bins=int(fbank_conf.get("num_mel_bins", cls.num_mel_bins)),
                   frame_length=float(fbank_conf.get("frame_length", cls.frame_length)),
                   frame_shift=float(fbank_conf.get("frame_shift", cls.frame_shift)),
                   dither=float(fbank_conf.get("dither", cls.dither)),
                   resample_rate=int(rate) if rate else None)

    @classmethod
    def from_config(cls, configs: Mapping[str, Any], name: Optional[str] = None) -> "FeatureConf":
        """The features of a whole training config (its ``dataset_conf``)."""
        return cls.from_dataset_conf(configs.get("dataset_conf"), name)

    def fbank_kwargs(self, dither: Optional[float] = None) -> Dict[str, Any]:
        """Keyword arguments of ``compute_fbank`` (``dither`` overrides the configured one)."""
        kwargs = asdict(self)
        del kwargs["resample_rate"]
        if dither is not None:
            kwargs["dither"] = dither
        return kwargs


@functools.lru_cache(maxsize=128)
def _tables(sample_rate: int, num_mel_bins: int, window_size: int, fft_size: int,
            vtln_warp: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Povey window (window_size,) and mel matrix (fft_size // 2 + 1, bins), built once
    per warp factor (Kaldi's VTLN cut-offs: 100 Hz and 500 Hz under the Nyquist rate)."""
    with torch.device("cpu"):  # host tables (cached), whatever torch's default device
        window = torch.hann_window(window_size, periodic=False).pow(0.85)
        mel, _ = kaldi.get_mel_banks(num_mel_bins, fft_size, float(sample_rate),
                                     20.0, 0.0, 100.0, -500.0, float(vtln_warp))
    mel = torch.nn.functional.pad(mel.float(), (0, 1)).t().contiguous()
    return window, mel


# The keys a ``fbank_conf`` may hold: FeatureConf's fields other than the resampling rate.
FBANK_CONF_KEYS = frozenset(f.name for f in fields(FeatureConf)) - {"resample_rate"}


def compute_fbank(wav: torch.Tensor, sample_rate: int,
                  num_mel_bins: int = FeatureConf.num_mel_bins,
                  frame_length: float = FeatureConf.frame_length,
                  frame_shift: float = FeatureConf.frame_shift,
                  dither: float = 0.0, vtln_warp: float = 1.0) -> torch.Tensor:
    """(1, samples) float waveform in [-1, 1] → (frames, num_mel_bins) fbank.

    The waveform is scaled to the int16 range first, as Kaldi and WeNet do, so
    features match theirs. This computes what ``torchaudio.compliance.kaldi.fbank``
    does with its defaults (povey window, snip_edges, DC removal, preemphasis
    0.97, power spectrum, log mel, no energy) up to float rounding, about twice
    as fast: the window and mel matrix are cached, and the unused frame energy,
    the padding copy and the complex ``abs`` are skipped (tests/dataset/test_pipeline.py
    checks the equality).

    ``vtln_warp`` (Kaldi's ``--vtln-warp``) warps the mel bins' frequencies: with
    factor ``a`` the content at ``f`` Hz lands in the bin that holds ``a * f`` without
    the warp (between the cut-offs; piecewise linear outside them). Training draws it
    per utterance as VTLP (``dataset_conf.vtlp``).
    """
    window_size = int(sample_rate * frame_length * 0.001)
    window_shift = int(sample_rate * frame_shift * 0.001)
    if wav.size(-1) < window_size:
        raise ValueError(f"{wav.size(-1)} samples are fewer than one {window_size}-sample window")
    fft_size = 1 << (window_size - 1).bit_length()
    window, mel = _tables(sample_rate, num_mel_bins, window_size, fft_size, vtln_warp)
    frames = (wav[0].float() * (1 << 15)).unfold(0, window_size, window_shift)
    if dither != 0.0:
        frames = frames + torch.randn(frames.shape, device=frames.device) * dither
    frames = frames - frames.mean(dim=1, keepdim=True)
    emphasised = torch.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - _PREEMPHASIS * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] * (1.0 - _PREEMPHASIS)
    emphasised *= window
    spectrum = torch.fft.rfft(emphasised, n=fft_size)
    power = spectrum.real.square() + spectrum.imag.square()
    energies = torch.mm(power, mel)
    return energies.clamp_(min=_ENERGY_FLOOR).log_()
