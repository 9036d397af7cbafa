"""Replay: lines of a second data.list mixed into every training epoch.

Fine-tuning a pretrained model on a few hours of speech overfits within a few epochs and
forgets what the pretraining corpus taught (its words, its voices). Replaying part of
the pretraining corpus alongside the new data is the usual remedy (rehearsal): each
epoch reads all of its own data.list plus ``round(ratio x own lines)`` lines of the replay
list, so with shards a ratio of 1 spends half of every epoch on replayed shards.

The replayed lines walk through the replay list in a seeded order without repeats:
epoch ``e`` takes positions ``e*n .. (e+1)*n - 1`` of an endless sequence made of one
permutation after another (permutation ``c`` seeded by (seed, c)). Every line is thus
read once before any is read twice, and an epoch's lines depend only on (seed, epoch),
so a resumed run replays exactly what the interrupted one would have read.

The replayed audio goes through the same pipeline (filter, augmentation, the training
corpus's CMVN) and must use the same units. With ``dataset_conf.cache_features`` the
cache keeps every replayed shard once read, so it grows towards the whole replay list.
"""
from __future__ import annotations

import math
import random
from typing import List, Tuple

from wenet.utils.file_utils import read_lists


class Replay:
    """The replay list and how many of its lines one epoch reads.

    Args:
        list_file: the data.list to replay from (same data_type as the training list).
        ratio: replayed lines per line of the training list (> 0).
        own_lines: the training list's number of lines.
    """

    def __init__(self, list_file: str, ratio: float, own_lines: int) -> None:
        if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0):
            raise ValueError(f"replay ratio must be a number > 0, got {ratio!r}")
        self.list_file = list_file
        self.lines = read_lists(list_file)
        if not self.lines:
            raise ValueError(f"{list_file}: the replay list has no lines")
        self.ratio = float(ratio)
        self.per_epoch = max(1, round(self.ratio * own_lines))

    def indices(self, seed: int, epoch: int) -> List[int]:
        """0-based line numbers of the replay list that epoch ``epoch`` reads."""
        total = len(self.lines)
        start, stop = epoch * self.per_epoch, (epoch + 1) * self.per_epoch
        out: List[int] = []
        for cycle in range(start // total, (stop - 1) // total + 1):  # the permutations spanned
            order = list(range(total))
            random.Random(f"replay:{seed}:{cycle}").shuffle(order)
            out += order[max(start - cycle * total, 0):min(stop - cycle * total, total)]
        return out

    def items(self, seed: int, epoch: int) -> List[Tuple[str, str]]:
        """The epoch's replayed lines, tagged ``file:line`` like the training list's."""
        return [(f"{self.list_file}:{i + 1}", self.lines[i]) for i in self.indices(seed, epoch)]
