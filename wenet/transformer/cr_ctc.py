"""Consistency-regularised CTC (CR-CTC, Yao et al. 2024): two views, one consistency loss.

Each training batch is duplicated and each copy gets its own random time masks
(:func:`time_mask`), so the encoder sees two differently masked views of every
utterance. Besides CTC (and the attention loss) on both views, the frame posteriors
of the two views are pulled together: each view's CTC distribution is the detached
target of the other's (:func:`consistency_loss`).

``time_mask_ratio`` scales icefall's default SpecAugment time masking (at most 15 %
of an utterance's frames, in up to 10 spans of at most 100 frames): a view of ``T``
valid frames gets up to ``n = min(ceil(10 r), ceil(0.15 r T / 100))`` spans, each of
a width drawn uniformly from ``[0, min(100, floor(0.15 r T / n)))`` frames at a
uniform position, set to 0 as the data pipeline's SpecAugment does. The CR-CTC paper
uses r = 2.5 (and then turns the pipeline's own time masks off). r = 0 masks nothing.
"""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F

from wenet.utils.mask import make_pad_mask

BASE_MAX_FRACTION = 0.15   # icefall's SpecAugment: share of the frames masked at most
BASE_NUM_MASKS = 10        # ... in at most this many spans
MAX_MASK_FRAMES = 100      # ... of at most this many frames each


def time_mask(feats: torch.Tensor, lengths: torch.Tensor, ratio: float) -> torch.Tensor:
    """``feats`` (B, T, D) with random time spans of each utterance's valid frames set to 0.

    Spans are drawn per utterance from the global torch generator (restored on resume)
    as the module docstring says; padding frames stay as they are. A new tensor.
    """
    if ratio <= 0:
        return feats.clone()
    batch, frames = feats.size(0), feats.size(1)
    max_masks = math.ceil(BASE_NUM_MASKS * ratio)
    device = feats.device
    budget = BASE_MAX_FRACTION * ratio * lengths.to(device=device, dtype=torch.float64)
    num = torch.minimum(torch.ceil(budget / MAX_MASK_FRAMES),
                        torch.tensor(float(max_masks), dtype=torch.float64, device=device))
    max_width = torch.clamp(torch.floor(budget / num.clamp(min=1)), max=MAX_MASK_FRAMES)
    u_width = torch.rand(batch, max_masks, dtype=torch.float64, device=device)
    u_start = torch.rand(batch, max_masks, dtype=torch.float64, device=device)
    width = torch.floor(u_width * max_width.unsqueeze(1))
    room = lengths.to(device=device, dtype=torch.float64).unsqueeze(1) - width
    start = torch.floor(u_start * room)
    used = torch.arange(max_masks, device=device).unsqueeze(0) < num.unsqueeze(1)
    t = torch.arange(frames, device=device, dtype=torch.float64).view(1, 1, frames)
    spans = (t >= start.unsqueeze(2)) & (t < (start + width).unsqueeze(2)) & used.unsqueeze(2)
    return feats.masked_fill(spans.any(dim=1).unsqueeze(2), 0.0)


def two_views(speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
              text_lengths: torch.Tensor, ratio: float
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch twice (view a: rows 0..B-1, view b: rows B..2B-1), each copy time-masked
    independently; lengths and targets repeated to match."""
    speech = torch.cat([time_mask(speech, speech_lengths, ratio),
                        time_mask(speech, speech_lengths, ratio)], dim=0)
    return (speech, speech_lengths.repeat(2), torch.cat([text, text], dim=0),
            text_lengths.repeat(2))


def consistency_loss(log_probs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-utterance consistency of the two views' CTC posteriors.

    ``log_probs`` (2B, T, V): view a in rows 0..B-1, view b in rows B..2B-1, with
    ``lengths`` (2B,) valid frames. Returns, averaged over the B utterances,
    ``0.5 * sum over valid frames [KL(sg(p_b) || p_a) + KL(sg(p_a) || p_b)]``
    (sg: no gradient; the 0.5 keeps it on the scale of one view's CTC loss, as
    icefall halves both). Zero when the two views' posteriors are equal.
    """
    if log_probs.size(0) % 2:
        raise ValueError(f"consistency_loss needs two views (an even batch), got {log_probs.size(0)}")
    if log_probs.dtype in (torch.float16, torch.bfloat16):  # autocast: sum in float32
        log_probs = log_probs.float()
    view_a, view_b = log_probs.chunk(2, dim=0)
    targets = torch.cat([view_b, view_a], dim=0).detach()
    kl = F.kl_div(log_probs, targets, reduction="none", log_target=True)
    kl = kl.masked_fill(make_pad_mask(lengths, log_probs.size(1)).unsqueeze(2), 0.0)
    return 0.5 * kl.sum() / view_a.size(0)
