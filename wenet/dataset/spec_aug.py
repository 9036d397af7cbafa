"""Feature-level augmentation on one utterance's (frames, bins) features.

Each function takes its randomness from a ``random.Random`` passed in, so a
pipeline seeded by (seed, epoch, rank, worker) replays exactly after a resume.
The input tensor is never modified; a new tensor is returned.

- ``spec_aug``: SpecAugment (Park et al. 2019): zeroed frequency bands and time
  spans, with optional time warping.
- ``spec_sub``: replace a few time spans with copies of earlier spans.
- ``spec_trim``: cut a random number of frames off the end.
- ``edge_pad``: lengthen the silence before and after the speech.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

from wenet.dataset.fbank import SILENCE_LOG_MEL


def time_warp(feats: torch.Tensor, rng: random.Random, max_w: int = 80) -> torch.Tensor:
    """Stretch the frames before a random centre and squeeze those after it (or vice versa).

    The centre moves by at most ``max_w`` frames; the total length is unchanged.
    Utterances shorter than ``2 * max_w + 1`` frames are returned as they are.
    """
    frames = feats.size(0)
    if max_w <= 0 or frames - max_w <= max_w:
        return feats
    center = rng.randrange(max_w, frames - max_w)
    warped = rng.randrange(center - max_w, center + max_w) + 1
    x = feats.t().unsqueeze(0)  # (1, bins, frames): interpolate along time
    left = F.interpolate(x[:, :, :center], size=warped, mode="linear", align_corners=False)
    right = F.interpolate(x[:, :, center:], size=frames - warped, mode="linear",
                          align_corners=False)
    return torch.cat([left, right], dim=2).squeeze(0).t().contiguous()


def spec_aug(feats: torch.Tensor, rng: random.Random, num_t_mask: int = 2,
             num_f_mask: int = 2, max_t: int = 50, max_f: int = 10,
             warp: bool = False, max_w: int = 80) -> torch.Tensor:
    """SpecAugment: ``num_f_mask`` bands of 1..max_f bins and ``num_t_mask`` spans of
    1..max_t frames set to zero (after an optional time warp)."""
    y = time_warp(feats, rng, max_w) if warp else feats
    y = y.clone()
    frames, bins = y.shape
    for _ in range(num_f_mask):
        start = rng.randint(0, bins - 1)
        y[:, start:start + rng.randint(1, max_f)] = 0
    for _ in range(num_t_mask):
        start = rng.randint(0, frames - 1)
        y[start:start + rng.randint(1, max_t), :] = 0
    return y


def spec_sub(feats: torch.Tensor, rng: random.Random, max_t: int = 20,
             num_t_sub: int = 3) -> torch.Tensor:
    """Replace ``num_t_sub`` spans of 1..max_t frames with the original frames some
    random distance earlier (WeNet's spec_sub)."""
    y = feats.clone()
    frames = feats.size(0)
    for _ in range(num_t_sub):
        start = rng.randint(0, frames - 1)
        end = min(frames, start + rng.randint(1, max_t))
        back = rng.randint(0, start)
        y[start:end] = feats[start - back:end - back]
    return y


def spec_trim(feats: torch.Tensor, rng: random.Random, max_t: int = 20) -> torch.Tensor:
    """Drop 1..max_t frames from the end, unless that would remove half the utterance."""
    frames = feats.size(0)
    length = rng.randint(1, max_t)
    if length < frames / 2:
        return feats[:frames - length].clone()
    return feats



def edge_pad(feats: torch.Tensor, rng: random.Random, max_t: int = 40, prob: float = 0.5,
             digital_prob: float = 0.3, max_drop_db: float = 40.0,
             search: int = 10) -> torch.Tensor:
    """Add 1..``max_t`` frames of silence before and/or after the utterance (each end with
    probability ``prob``), the transcript unchanged.

    Why: a corpus whose every utterance has a short lead-in of one kind teaches a model that
    speech starts after it. Given a segment cut from a long recording (a longer pause,
    quieter, or digital zeros, which a decoder without dither turns into the fbank floor),
    such a model misrecognises words in the middle of the segment as well (RESULTS.md, Long
    audio). A pad is digital silence (every bin at the fbank floor, as ``compute_fbank``
    gives for zeros) with probability ``digital_prob``; otherwise it is made of the three
    quietest of the ``search`` frames at that end, in random order, made quieter by one drop
    drawn uniformly from 0..``max_drop_db`` dB of power (a constant in every log-mel bin),
    never below the floor. Utterances of fewer than ``search`` frames are returned as they are.
    """
    frames = feats.size(0)
    if frames < search or max_t < 1:
        return feats
    parts = [feats]
    for front in (True, False):
        if rng.random() >= prob:
            continue
        length = rng.randint(1, max_t)
        if rng.random() < digital_prob:
            pad = feats.new_full((length, feats.size(1)), SILENCE_LOG_MEL)
        else:
            edge = feats[:search] if front else feats[frames - search:]
            quiet = edge.sum(dim=1).argsort()[:3].tolist()
            picks = [quiet[rng.randrange(len(quiet))] for _ in range(length)]
            drop = rng.uniform(0.0, max_drop_db) * math.log(10.0) / 10.0  # dB of power, in nats
            pad = (edge[picks] - drop).clamp_(min=SILENCE_LOG_MEL)
        if front:
            parts.insert(0, pad)
        else:
            parts.append(pad)
    return torch.cat(parts) if len(parts) > 1 else feats
