"""edge_pad (wenet/dataset/spec_aug.py): longer silence at the ends of an utterance.

References: the fbank of digital zeros (``compute_fbank`` and torchaudio's Kaldi fbank),
the utterance's own frames (the middle of the output is the input, exactly), and the
option's stated probabilities counted over many seeds with binomial bounds.
"""
from __future__ import annotations

import math
import random
from typing import Tuple

import numpy as np
import pytest
import torch
import torchaudio.compliance.kaldi as kaldi

from tests.dataset.test_pipeline import PLAIN, RATE, TABLE, collect, make_corpus, reference_fbank, \
    write_shards
from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import compute_fbank
from wenet.dataset.spec_aug import SILENCE_LOG_MEL, edge_pad
from wenet.inference.batch_decoding import decoding_dataset_conf

NATS_PER_DB = math.log(10.0) / 10.0


def _split(y: torch.Tensor, x: torch.Tensor, max_t: int) -> Tuple[int, int]:
    """(front, back) pad lengths: where ``x`` sits, unchanged, inside ``y``."""
    back_total = y.size(0) - x.size(0)
    for front in range(0, min(max_t, back_total) + 1):
        if torch.equal(y[front:front + x.size(0)], x):
            return front, back_total - front
    raise AssertionError("the utterance's own frames are not kept intact in the output")


def _check_pad(pad: torch.Tensor, edge: torch.Tensor, max_drop_db: float) -> str:
    """``pad`` is digital silence, or rows of the 3 quietest ``edge`` frames all lowered by
    one drop within 0..max_drop_db (floored): return which."""
    if bool((pad == SILENCE_LOG_MEL).all()):
        return "digital"
    quiet = edge[edge.sum(dim=1).argsort()[:3]]
    # the drop: the same for every row; find it from the row's unfloored bins
    drops = []
    for row in pad:
        found = None
        for q in quiet:
            d = q - row
            free = row > SILENCE_LOG_MEL + 1e-6
            if not bool(free.any()):
                found = float("nan")
                break
            spread = d[free].max() - d[free].min()
            if float(spread) < 1e-4 and bool((row[~free] == SILENCE_LOG_MEL).all()) and \
                    bool((q[~free] - d[free].mean() <= SILENCE_LOG_MEL + 1e-4).all()):
                found = float(d[free].mean())
                break
        assert found is not None, "a pad frame is not one of the quietest edge frames, lowered"
        if not math.isnan(found):
            drops.append(found)
    if drops:
        assert max(drops) - min(drops) < 1e-3, f"one drop per pad, got {drops}"
        assert -1e-4 <= min(drops) and max(drops) <= max_drop_db * NATS_PER_DB + 1e-4
    return "lowered"


def test_digital_silence_is_the_fbank_of_zeros():
    zeros = torch.zeros(1, RATE // 2)
    ours = compute_fbank(zeros, RATE, num_mel_bins=80, frame_length=25, frame_shift=10,
                         dither=0.0)
    ref = kaldi.fbank(zeros, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                      energy_floor=0.0, sample_frequency=RATE)
    assert bool((ours == SILENCE_LOG_MEL).all())
    torch.testing.assert_close(ref, torch.full_like(ref, SILENCE_LOG_MEL), rtol=0, atol=1e-5)


def test_edge_pad_keeps_the_utterance_and_pads_as_documented():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 8, generator=gen) * 3
    x[:3] -= 12.0  # quiet lead-in and tail, one frame at the floor in places
    x[-3:] -= 12.0
    x[1, :2] = SILENCE_LOG_MEL
    original = x.clone()
    max_t, max_drop_db, seeds = 7, 40.0, 600
    kinds, lengths, padded_ends = {"digital": 0, "lowered": 0}, set(), 0
    for seed in range(seeds):
        y = edge_pad(x, random.Random(seed), max_t=max_t, prob=0.5, digital_prob=0.3,
                     max_drop_db=max_drop_db)
        assert torch.equal(y, edge_pad(x, random.Random(seed), max_t=max_t, prob=0.5,
                                       digital_prob=0.3, max_drop_db=max_drop_db))
        front, back = _split(y, x, max_t)
        for n, pad, edge in ((front, y[:front], x[:10]), (back, y[y.size(0) - back:], x[-10:])):
            if n == 0:
                continue
            assert 1 <= n <= max_t
            lengths.add(n)
            padded_ends += 1
            kinds[_check_pad(pad, edge, max_drop_db)] += 1
    assert torch.equal(x, original)  # the input is never modified
    assert lengths == set(range(1, max_t + 1))
    # each end padded with probability 0.5, a pad digital with probability 0.3 (5 sigma)
    ends = 2 * seeds
    assert abs(padded_ends - 0.5 * ends) <= 5 * math.sqrt(ends * 0.25)
    assert abs(kinds["digital"] - 0.3 * padded_ends) <= 5 * math.sqrt(padded_ends * 0.21)


def test_edge_pad_limits():
    x = torch.randn(9, 4)
    assert edge_pad(x, random.Random(0), prob=1.0, search=10) is x  # fewer frames than search
    y = torch.randn(30, 4)
    assert edge_pad(y, random.Random(0), prob=0.0) is y
    both = edge_pad(y, random.Random(3), max_t=4, prob=1.0, digital_prob=1.0)
    front, back = _split(both, y, 4)
    assert front >= 1 and back >= 1
    assert bool((both[:front] == SILENCE_LOG_MEL).all() and (both[-back:] == SILENCE_LOG_MEL).all())


def test_edge_pad_in_the_pipeline_when_training_only(tmp_path):
    corpus = make_corpus(3, seed=5)
    data_list = write_shards(tmp_path, corpus, per_shard=3)
    conf = {**PLAIN, "edge_pad": True, "edge_pad_conf": {"prob": 1.0, "max_t": 5,
                                                         "digital_prob": 1.0}}
    batches = list(Dataset("shard", data_list, TABLE, conf))
    padded = collect(batches)
    added = {k: int(n) for b in batches for k, n in zip(b["keys"], b["added_frames"])}
    plain = collect(Dataset("shard", data_list, TABLE, conf, training=False))
    for key, _, audio in corpus:
        ref = reference_fbank(audio)
        torch.testing.assert_close(plain[key][0], ref, rtol=0, atol=1e-4)
        feat = padded[key][0]
        front = int((feat[:, 0] == SILENCE_LOG_MEL).long().cumprod(0).sum())
        back = int((feat.flip(0)[:, 0] == SILENCE_LOG_MEL).long().cumprod(0).sum())
        assert 1 <= front <= 5 and 1 <= back <= 5
        torch.testing.assert_close(feat[front:feat.size(0) - back], ref, rtol=0, atol=1e-4)
        assert added[key] == front + back
    assert all("added_frames" not in b for b in Dataset("shard", data_list, TABLE, conf,
                                                        training=False))
    assert decoding_dataset_conf(conf, 4)["edge_pad"] is False
    with pytest.raises(ValueError, match="unknown keys \\['level'\\]"):
        Dataset("shard", data_list, TABLE, {**conf, "edge_pad_conf": {"level": 1}})


def test_quiet_noise_lowered_in_log_mel_equals_the_fbank_of_the_quieter_noise():
    """The lowered pads' premise: noise made quieter by D dB has the same log-mel frames
    less D dB of power in every bin (fbank without dither)."""
    rng = np.random.default_rng(1)
    noise = torch.from_numpy(rng.standard_normal(RATE // 4).astype(np.float32) * 300 / 32768)
    loud = compute_fbank(noise[None], RATE, num_mel_bins=40, frame_length=25, frame_shift=10,
                         dither=0.0)
    quiet = compute_fbank(noise[None] * 10 ** (-20 / 20), RATE, num_mel_bins=40,
                          frame_length=25, frame_shift=10, dither=0.0)
    torch.testing.assert_close(quiet, loud - 20 * NATS_PER_DB, rtol=0, atol=1e-3)
