"""The data pipeline's stages after reading: small generators, each taking and yielding samples.

A sample is a dict that grows as it moves down the chain (``key``, ``src``,
``txt``, ``wav`` (1, N) float in [-1, 1], ``sample_rate``, ``label``, ``feat``
(T, D)); ``wenet.dataset.sources`` starts it from shards or raw list lines, and
``wenet.dataset.dataset`` chains the stages in one place.

Stages never raise on bad data: they skip (or repair) the utterance and record
the reason in a ``PipelineStats``, with a warning that names the utterance and
the shard or list line it came from. Randomness comes only from the
``random.Random`` handed in, never from global state.
"""
from __future__ import annotations

import random
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.nn.utils.rnn import pad_sequence

from wenet.dataset import spec_aug as aug
from wenet.dataset.stats import PipelineStats
from wenet.dataset.tokenizer import Tokenizer
from wenet.dataset.audio import resample, to_mono
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.dataset.sources import Sample

HOST = torch.device("cpu")  # the pipeline's tensors, whatever torch's default device


# ---------------------------------------------------------------- waveform stages

def check_audio(samples: Iterable[Sample], stats: PipelineStats) -> Iterator[Sample]:
    """Drop empty audio and audio with NaN or infinite samples (a float WAV can hold them);
    downmix multi-channel audio to mono (all logged)."""
    for s in samples:
        wav = s["wav"]
        if wav.size(1) == 0:
            stats.warn("empty_audio", f"utterance {s['key']} ({s['src']}): zero-length audio")
            continue
        bad = int((~torch.isfinite(wav)).sum())
        if bad:
            stats.warn("non_finite_audio", f"utterance {s['key']} ({s['src']}): {bad} NaN or "
                       "infinite samples")
            continue
        if wav.size(0) > 1:
            stats.warn("stereo_downmixed", f"utterance {s['key']} ({s['src']}): "
                       f"{wav.size(0)} channels averaged to mono")
            s["wav"] = to_mono(wav)
        yield s


def tokenize(samples: Iterable[Sample], tokenizer: Tokenizer,
             stats: PipelineStats) -> Iterator[Sample]:
    """Add ``label`` (token ids); utterances with pieces missing from the table are dropped."""
    for s in samples:
        ids, missing = tokenizer.encode(s["txt"])
        if missing:
            stats.oov_pieces.update(missing)
            stats.warn("oov", f"utterance {s['key']} ({s['src']}): pieces not in the symbol "
                       f"table: {' '.join(sorted(set(missing)))}")
            continue
        s["label"] = ids
        yield s


def filter_samples(samples: Iterable[Sample], stats: PipelineStats, max_length: float = 10240,
                   min_length: float = 10, token_max_length: int = 200,
                   token_min_length: int = 1, min_output_input_ratio: float = 0.0005,
                   max_output_input_ratio: float = 1.0) -> Iterator[Sample]:
    """WeNet's length filter: frames (10 ms) and tokens within bounds, tokens/frames ratio too."""
    for s in samples:
        frames = s["wav"].size(1) / s["sample_rate"] * 100
        tokens = len(s["label"])
        if frames < min_length:
            stats.count("filtered_too_short")
        elif frames > max_length:
            stats.count("filtered_too_long")
        elif tokens < token_min_length:
            stats.count("filtered_too_few_tokens")
        elif tokens > token_max_length:
            stats.count("filtered_too_many_tokens")
        elif frames > 0 and tokens / frames < min_output_input_ratio:
            stats.count("filtered_ratio_too_low")
        elif frames > 0 and tokens / frames > max_output_input_ratio:
            stats.count("filtered_ratio_too_high")
        else:
            yield s


def resample_samples(samples: Iterable[Sample], stats: PipelineStats,
                     resample_rate: int = 16000) -> Iterator[Sample]:
    """Bring every utterance to ``resample_rate`` (logged, since it usually means a data slip)."""
    for s in samples:
        rate = s["sample_rate"]
        if rate != resample_rate:
            stats.warn("resampled", f"utterance {s['key']} ({s['src']}): {rate} Hz resampled "
                       f"to {resample_rate} Hz")
            s["wav"] = resample(s["wav"], rate, resample_rate)
            s["sample_rate"] = resample_rate
        yield s


def speed_perturb(samples: Iterable[Sample], rng: random.Random,
                  speeds: Sequence[float] = (0.9, 1.0, 1.1)) -> Iterator[Sample]:
    """Play each utterance at a randomly chosen speed (pitch moves too, as with sox ``speed``).

    Speed ``f`` treats the samples as if recorded at ``rate * f`` and resamples
    them back to ``rate``: the result is ``1 / f`` times as long.
    """
    for s in samples:
        speed = rng.choice(speeds)
        if speed != 1.0:
            rate = s["sample_rate"]
            s["wav"] = resample(s["wav"], int(round(rate * speed)), rate)
        yield s


def fbank(samples: Iterable[Sample], stats: PipelineStats, rng: random.Random,
          conf: FeatureConf, vtlp: Optional[Tuple[float, float]] = None) -> Iterator[Sample]:
    """Replace ``wav`` with Kaldi fbank ``feat`` (T, D) as ``conf`` says.

    Dither noise is drawn from a torch generator seeded from ``rng`` (inside a
    forked RNG), so it replays on resume and leaves the trainer's RNG alone.
    ``vtlp`` = (min, max): vocal tract length perturbation, a VTLN warp factor
    drawn uniformly from the range per utterance (to 0.01, so the warped mel
    tables are built once each) and kept in the sample as ``vtln_warp``.
    """
    for s in samples:
        wav, rate = s.pop("wav"), s["sample_rate"]
        if wav.size(1) < int(rate * conf.frame_length / 1000):
            stats.warn("shorter_than_window", f"utterance {s['key']} ({s['src']}): "
                       f"{wav.size(1)} samples, shorter than one fbank window")
            continue
        kwargs = conf.fbank_kwargs()
        if vtlp is not None:
            kwargs["vtln_warp"] = s["vtln_warp"] = round(rng.uniform(*vtlp), 2)
        if conf.dither > 0:
            with torch.random.fork_rng(devices=[]):
                # the CPU generator only: torch.manual_seed would also queue CUDA seeding
                torch.default_generator.manual_seed(rng.getrandbits(63))
                feat = compute_fbank(wav, rate, **kwargs)
        else:
            feat = compute_fbank(wav, rate, **kwargs)
        if not bool(torch.isfinite(feat).all()):  # finite samples too large for float32 after scaling
            stats.warn("non_finite_features", f"utterance {s['key']} ({s['src']}): fbank has "
                       "NaN or infinite values")
            continue
        s["feat"] = feat
        yield s


# ---------------------------------------------------------------- feature stages

def edge_pad_samples(samples: Iterable[Sample], rng: random.Random,
                     **conf) -> Iterator[Sample]:
    """Longer silence at the ends of every utterance (``spec_aug.edge_pad``); the frames
    added are kept as ``added_frames``, so that throughput counts the utterance's audio."""
    for s in samples:
        frames = s["feat"].size(0)
        s["feat"] = aug.edge_pad(s["feat"], rng, **conf)
        s["added_frames"] = s["feat"].size(0) - frames
        yield s


def spec_aug_samples(samples: Iterable[Sample], rng: random.Random,
                     **conf) -> Iterator[Sample]:
    """SpecAugment on every utterance (see ``spec_aug.spec_aug`` for the options)."""
    for s in samples:
        s["feat"] = aug.spec_aug(s["feat"], rng, **conf)
        yield s


def spec_sub_samples(samples: Iterable[Sample], rng: random.Random,
                     **conf) -> Iterator[Sample]:
    """Time-span substitution on every utterance (``spec_aug.spec_sub``)."""
    for s in samples:
        s["feat"] = aug.spec_sub(s["feat"], rng, **conf)
        yield s


def spec_trim_samples(samples: Iterable[Sample], rng: random.Random,
                      **conf) -> Iterator[Sample]:
    """Random end trimming on every utterance (``spec_aug.spec_trim``)."""
    for s in samples:
        s["feat"] = aug.spec_trim(s["feat"], rng, **conf)
        yield s


# ---------------------------------------------------------------- ordering and batching

def shuffle(samples: Iterable[Sample], rng: random.Random,
            shuffle_size: int = 10000) -> Iterator[Sample]:
    """Shuffle within a buffer of ``shuffle_size`` utterances."""
    buf: List[Sample] = []
    for s in samples:
        buf.append(s)
        if len(buf) >= shuffle_size:
            rng.shuffle(buf)
            yield from buf
            buf = []
    rng.shuffle(buf)
    yield from buf


def sort(samples: Iterable[Sample], sort_size: int = 500) -> Iterator[Sample]:
    """Sort by frame count within a buffer of ``sort_size``, so batches pad less."""
    buf: List[Sample] = []
    for s in samples:
        buf.append(s)
        if len(buf) >= sort_size:
            buf.sort(key=lambda x: x["feat"].size(0))
            yield from buf
            buf = []
    buf.sort(key=lambda x: x["feat"].size(0))
    yield from buf


def static_batch(samples: Iterable[Sample], batch_size: int = 16) -> Iterator[List[Sample]]:
    """Batches of ``batch_size`` utterances (the last may be smaller)."""
    buf: List[Sample] = []
    for s in samples:
        buf.append(s)
        if len(buf) >= batch_size:
            yield buf
            buf = []
    if buf:
        yield buf


def dynamic_batch(samples: Iterable[Sample],
                  max_frames_in_batch: int = 12000) -> Iterator[List[Sample]]:
    """Batches whose padded size (longest × count) stays within ``max_frames_in_batch``.

    An utterance longer than the limit on its own forms a batch by itself.
    """
    buf: List[Sample] = []
    longest = 0
    for s in samples:
        frames = s["feat"].size(0)
        new_longest = max(longest, frames)
        if buf and new_longest * (len(buf) + 1) > max_frames_in_batch:
            yield buf
            buf, new_longest = [], frames
        buf.append(s)
        longest = new_longest
    if buf:
        yield buf


def pad_batch(batches: Iterable[List[Sample]], stats: PipelineStats) -> Iterator[dict]:
    """Lists of samples → the batch dict of docs/interfaces.md (longest first, as in WeNet);
    ``added_frames`` only when some sample has it (edge_pad)."""
    for batch in batches:
        batch = sorted(batch, key=lambda s: s["feat"].size(0), reverse=True)
        feats = [s["feat"] for s in batch]
        labels = [torch.tensor(s["label"], dtype=torch.int64, device=HOST) for s in batch]
        stats.utterances += len(batch)
        stats.batches += 1
        out = {
            "keys": [s["key"] for s in batch],
            "feats": pad_sequence(feats, batch_first=True, padding_value=0.0),
            "feats_lengths": torch.tensor([f.size(0) for f in feats], dtype=torch.int64,
                                          device=HOST),
            "target": pad_sequence(labels, batch_first=True, padding_value=-1),
            "target_lengths": torch.tensor([len(x) for x in labels], dtype=torch.int64,
                                           device=HOST),
        }
        if any("added_frames" in s for s in batch):
            out["added_frames"] = torch.tensor([s.get("added_frames", 0) for s in batch],
                                               dtype=torch.int64, device=HOST)
        yield out
