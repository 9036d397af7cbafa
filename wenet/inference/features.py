"""Audio to features at inference: the one place that decides how a trained model's
features are computed when it recognises or aligns.

:func:`inference_feature_conf` is training's fbank (``dataset_conf``) without dither, a
training-time augmentation: recognition is deterministic. Every inference path takes its
``FeatureConf`` from it (through ``LoadedModel.feature_conf``): batch recognition
(:func:`feature_batches`, the data pipeline's own stages on audio given by the caller),
streams (:class:`IncrementalFbank`) and forced alignment.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Iterable, Iterator, Mapping, Optional, Tuple

import torch

from wenet.dataset import processor
from wenet.dataset.audio import AudioError, load_audio
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.dataset.stats import PipelineStats


def inference_feature_conf(configs: Mapping[str, Any], name: Optional[str] = None) -> FeatureConf:
    """The features of a training config (``train.yaml``) for recognition: no dither."""
    return replace(FeatureConf.from_config(configs, name), dither=0.0)


def _samples(items: Iterable[Tuple[str, Any]], stats: PipelineStats) -> Iterator[dict]:
    """Samples of the pipeline from ``(key, path or (waveform, rate))``; unreadable audio
    is skipped and counted."""
    for key, audio in items:
        if isinstance(audio, tuple):
            (wav, rate), src = audio, "array"
        else:
            src = audio.strip()
            try:
                wav, rate = load_audio(audio)
            except AudioError as e:
                stats.warn("audio_decode_error", f"utterance {key} ({src}): {e}")
                continue
        yield {"key": key, "src": src, "txt": "", "label": [], "wav": wav,
               "sample_rate": rate, "duration_s": wav.size(-1) / rate}


def min_duration_s(conf: FeatureConf, frames: int) -> float:
    """Seconds of audio that give ``frames`` fbank frames (Kaldi framing, snip_edges)."""
    return (conf.frame_length + (frames - 1) * conf.frame_shift) / 1000.0 if frames > 0 else 0.0


def _long_enough(samples: Iterable[dict], stats: PipelineStats, conf: FeatureConf,
                 min_frames: int) -> Iterator[dict]:
    """Drop (and log by key and file) features shorter than ``min_frames`` frames: the
    model gives no output frame for them, and refusing them here keeps them out of the
    batches of the other inputs."""
    for s in samples:
        frames = s["feat"].size(0)
        if frames < min_frames:
            stats.warn("too_short", f"utterance {s['key']} ({s['src']}): "
                       f"{s['duration_s']:.3g} s ({frames} feature frames) is shorter "
                       "than the model's minimum "
                       f"{min_duration_s(conf, min_frames):.3g} s ({min_frames} frames)")
            continue
        yield s


def feature_batches(items: Iterable[Tuple[str, Any]], conf: FeatureConf, batch_size: int,
                    stats: PipelineStats, min_frames: int = 0,
                    keep_audio: bool = False) -> Iterator[dict]:
    """Padded batches (``keys``, ``feats``, ``feats_lengths``) of ``(key, audio)`` pairs:
    the data pipeline's checks, resampling to the model's rate and fbank; inputs with
    fewer than ``min_frames`` feature frames (``loader.min_input_frames``) are skipped.
    With ``keep_audio`` each batch also holds ``audio``: the mono samples (1-D) at
    ``sample_rate`` that each key's features were computed from (for word times that look
    at the audio, ``wenet.alignment.timing``)."""
    data = processor.check_audio(_samples(items, stats), stats)
    rate = conf.resample_rate or 16000
    data = processor.resample_samples(data, stats, rate)
    if keep_audio:
        data = _keep_wav(data)
    data = processor.fbank(data, stats, random.Random(0), conf)
    data = _long_enough(data, stats, conf, min_frames)
    batches = processor.static_batch(data, batch_size)
    if not keep_audio:
        return processor.pad_batch(batches, stats)
    return _with_audio(batches, stats, rate)


def _keep_wav(samples: Iterable[dict]) -> Iterator[dict]:
    for s in samples:
        s["kept_wav"] = s["wav"][0]
        yield s


def _with_audio(batches: Iterable[list], stats: PipelineStats, rate: int) -> Iterator[dict]:
    for batch in batches:
        audio = {s["key"]: s.pop("kept_wav") for s in batch}
        for padded in processor.pad_batch([batch], stats):
            padded["audio"] = [audio[k] for k in padded["keys"]]
            padded["sample_rate"] = rate
            yield padded


class IncrementalFbank:
    """Fbank of a growing waveform, frame for frame equal to ``compute_fbank`` of the whole
    (Kaldi framing with snip_edges: frame ``i`` reads samples ``[i * shift, i * shift +
    window)`` and nothing else, so the complete frames are computed from the retained
    samples, which start at the first sample of the next frame). ``conf`` is an inference
    conf (:func:`inference_feature_conf`)."""

    def __init__(self, conf: FeatureConf, sample_rate: int = 16000) -> None:
        self.conf = conf
        self.sample_rate = sample_rate
        self.window = int(sample_rate * conf.frame_length * 0.001)
        self.shift = int(sample_rate * conf.frame_shift * 0.001)
        self._kwargs = conf.fbank_kwargs()
        self._pending = torch.zeros(0)   # samples from the first sample of the next frame on
        self.frames_out = 0

    @property
    def pending_samples(self) -> int:
        """Samples kept for frames not yet complete."""
        return int(self._pending.numel())

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """Take float samples in [-1, 1] (1-D); return the newly complete frames (n, bins)."""
        buf = torch.cat([self._pending, samples.reshape(-1).float()])
        if buf.numel() < self.window:
            self._pending = buf
            return torch.zeros(0, self.conf.num_mel_bins)
        n = 1 + (buf.numel() - self.window) // self.shift
        feats = compute_fbank(buf[:(n - 1) * self.shift + self.window].unsqueeze(0),
                              self.sample_rate, **self._kwargs)
        self._pending = buf[n * self.shift:].clone()
        self.frames_out += n
        return feats
