"""The training/validation data pipeline: data.list → padded batches.

The whole chain is assembled in ``Dataset._pipeline``::

    data.list (+ the epoch's replayed lines of a second list, replay.py; shuffled per
    epoch, split by rank, then by DataLoader worker)
    → tar shards read as streams / raw JSON lines → decoded audio (mono)
    → tokenize → filter → resample → speed perturb → fbank (VTLP warp)
    → edge_pad → spec_aug → spec_sub → spec_trim → shuffle buffer → sort buffer → batch → pad

configured by WeNet 2.x's ``dataset_conf`` keys, plus ``cache_features``: keep
each shard's fbank features (everything up to fbank) in memory after their first
pass, so that later epochs only augment, shuffle and batch. On a CPU machine the
fbank of every epoch otherwise competes with training for the same cores. The
cache lives in the process that iterates the dataset (use ``num_workers`` 0);
dither noise is then drawn once, and speed perturbation and VTLP, which must be
drawn anew each epoch, cannot be combined with it. Under DDP the shards a rank reads
change from epoch to epoch, so each rank's cache grows towards the whole list
(memory: ~4 bytes x num_mel_bins x 100 frames per second of audio).

Randomness is seeded so that a pass is reproducible, and ``consume`` can skip
exactly the batches a run had already trained on before it was interrupted:

- the feature stages never draw from the pass's stream: an utterance's dither (and
  VTLP warp) in epoch ``e`` comes from a seed of (seed, e, its source, its key), and with the
  cache every epoch uses epoch 0's draws. A run resumed with an empty cache thus
  recomputes exactly the features the uninterrupted run had cached; speed
  perturbation (never cached) has a stream of its own;
- edge_pad, SpecAugment, spec_sub/trim and the shuffle buffer draw from a ``random.Random``
  seeded by (seed, epoch, rank, worker), the same with or without the cache.

Readers (ranks x DataLoader workers) normally split the data.list by line. When
it has fewer lines than readers, every reader reads every line and keeps one
utterance in N (utterance ``j`` of line ``i`` goes to reader ``(i + j) mod N``),
so no rank is left without data; raw lists (one utterance per line) with fewer
lines than readers are refused with the numbers.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from wenet.dataset import processor, sources
from wenet.dataset.conf import check_conf, sub_conf, vtlp_range
from wenet.dataset.fbank import FeatureConf
from wenet.dataset.replay import Replay
from wenet.dataset.stats import PipelineStats
from wenet.dataset.tokenizer import Tokenizer
from wenet.utils.file_utils import read_lists

logger = logging.getLogger(__name__)

@dataclasses.dataclass
class _Reading:
    """What one pass of one reader reads: its list items, its share of their utterances
    (None: all; else (reader, readers)), its counters and the feature stages' RNG."""

    items: List[Tuple[str, str]]
    share: Optional[Tuple[int, int]]
    stats: PipelineStats
    feature_rng: random.Random


class Dataset(IterableDataset):
    """Iterable of ready batches (dicts, see docs/interfaces.md) for one rank.

    Args:
        data_type: ``shard`` (data.list holds tar paths or URLs), ``raw`` (JSON lines)
            or ``scp`` (wav.scp lines or audio file paths; recognition only).
        data_list_file: the data.list.
        symbol_table: ``units.txt`` path or its {token: id} dict.
        conf: WeNet 2.x ``dataset_conf``.
        bpe_model: sentencepiece model; None tokenizes by characters.
        partition: split the list between ranks (False: every rank reads everything).
        training: False turns off list/buffer shuffling, speed perturbation, VTLP,
            spec_aug/spec_sub/spec_trim and dither (cross-validation, recognition).
        rank, world_size: this process's place; default from torch.distributed
            when initialised, else 0 and 1.
        seed: base of every per-pass seed.
        need_text: False for recognition: a missing, empty or OOV transcript neither
            drops nor changes an utterance (not tokenised; ``target`` empty).
        replay_list, replay_ratio: training only: each epoch also reads
            ``round(replay_ratio x lines)`` lines of this list (wenet/dataset/replay.py).
    """

    def __init__(self, data_type: str, data_list_file: str,
                 symbol_table: Union[str, Dict[str, int]], conf: dict,
                 bpe_model: Optional[str] = None, partition: bool = True, *,
                 training: bool = True, rank: Optional[int] = None,
                 world_size: Optional[int] = None, seed: int = 0,
                 need_text: bool = True, replay_list: Optional[str] = None,
                 replay_ratio: float = 1.0) -> None:
        super().__init__()
        if data_type not in ("shard", "raw", "scp"):
            raise ValueError(f"data_type must be 'shard', 'raw' or 'scp', got {data_type!r}")
        if data_type == "scp" and need_text:
            raise ValueError("data_type 'scp' has no transcripts: use it with need_text=False")
        self.need_text = need_text
        check_conf(conf)
        self.cache_features = bool(conf.get("cache_features", False))
        for perturb in ("speed_perturb", "vtlp"):
            if self.cache_features and training and conf.get(perturb, False):
                raise ValueError("dataset_conf.cache_features keeps each utterance's features "
                                 f"from its first pass, so {perturb} would draw once for good: "
                                 "turn one of them off")
        # list line (shard path or JSON line) → its samples after fbank, and the skip/repair
        # counts its first pass recorded (replayed into later passes' summaries)
        self._cache: Dict[str, Tuple[List[dict], Counter]] = {}
        self.data_type = data_type
        self.data_list_file = data_list_file
        self.lists = read_lists(data_list_file)
        if replay_list is not None and not training:
            raise ValueError("replay_list mixes another list into training epochs; "
                             "a CV or recognition dataset takes none")
        self.replay = (Replay(replay_list, replay_ratio, len(self.lists))
                       if replay_list is not None else None)
        self.tokenizer = Tokenizer(symbol_table, bpe_model)
        self.conf = conf
        self.partition = partition
        self.training = training
        self.rank, self.world_size = rank, world_size
        self.seed = seed
        self.epoch = 0
        self._skip = 0             # batches to skip at the start of the next consume()
        self._consumed = 0         # batches consumed so far in this epoch
        self._loader_shape: Tuple[int, int] = (1, 0)   # (world_size, num_workers) of consume()
        self._saved_shape: Optional[tuple] = None        # the same, from a loaded state
        self.last_stats: Optional[PipelineStats] = None  # of the last pass run in this process
        # (rank, world) resolved in the main process, so that workers started
        # with 'spawn' (no process group of their own) still split correctly
        self._dist_shape: Optional[Tuple[int, int]] = None
        self._split_logged = False  # the utterance split is logged once

    # ------------------------------------------------------------ epoch and resume state

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose shuffle order the next pass uses.

        A resume position loaded for this same epoch is kept; any other epoch
        starts from its first batch.
        """
        if epoch != self.epoch:
            self._skip = 0
            self._consumed = 0
        self.epoch = epoch
        self._dist_shape = self._rank_world()

    def state_dict(self) -> dict:
        """Where this rank stands: the epoch and how many of its batches were consumed.

        The count is kept by ``consume``; world size and DataLoader workers are
        recorded because the batch order depends on them.
        """
        world, workers = self._loader_shape
        return {"epoch": self.epoch, "batches_consumed": self._consumed, "seed": self.seed,
                "world_size": world, "num_workers": workers}

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next ``consume`` of ``state['epoch']`` skips the batches already consumed."""
        try:
            epoch, consumed = int(state["epoch"]), int(state["batches_consumed"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"dataset state needs integer 'epoch' and 'batches_consumed': {state!r}") from e
        if "seed" in state and state["seed"] != self.seed:
            logger.warning("dataset state was saved with seed %s, this run uses %s: "
                           "the resumed epoch will not replay the same batches",
                           state["seed"], self.seed)
        self.epoch = epoch
        self._skip = consumed
        self._consumed = consumed
        self._saved_shape = (state.get("world_size"), state.get("num_workers"))

    def consume(self, loader: Iterable[dict]) -> Iterator[dict]:
        """Iterate ``loader`` (a DataLoader over this dataset, or the dataset itself),
        skipping the batches consumed before a resume and counting the rest.

        Skipped batches are still computed (the pipeline's randomness and the
        DataLoader's worker interleaving must replay), so the resumed epoch
        continues with exactly the batches an uninterrupted run would deliver,
        given the same data, conf, seed, world size and number of workers.
        """
        if getattr(loader, "persistent_workers", False):
            raise ValueError("persistent_workers=True would keep each worker's old epoch; "
                             "create the DataLoader without it")
        rank, world = self._dist_shape = self._rank_world()
        shape = (world, int(getattr(loader, "num_workers", 0)))
        saved = self._saved_shape
        skip = self._skip
        if skip and saved is not None and None not in saved and tuple(saved) != shape:
            logger.warning("resuming epoch %d with world_size/num_workers %s, saved with %s: "
                           "the skipped batches will not be exactly those already seen",
                           self.epoch, shape, tuple(saved))
        self._loader_shape = shape
        self._skip = 0
        self._consumed = 0
        if skip:
            logger.info("rank %d: skipping the %d batches of epoch %d consumed before resuming",
                        rank, skip, self.epoch)
        for i, batch in enumerate(loader):
            self._consumed = i + 1
            if i < skip:
                continue
            yield batch
        if self._consumed < skip:
            logger.warning("rank %d: epoch %d has only %d batches, but the resumed state said "
                           "%d were consumed", rank, self.epoch, self._consumed, skip)

    # ------------------------------------------------------------ iteration

    def _rank_world(self) -> Tuple[int, int]:
        if self.rank is not None or self.world_size is not None:
            return int(self.rank or 0), int(self.world_size or 1)
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def _my_items(self, rank: int, world: int, worker: int,
                  num_workers: int) -> Tuple[List[Tuple[str, str]], Optional[Tuple[int, int]]]:
        """This (rank, worker)'s share of the data.list lines, tagged with file:line, and
        None, or (this reader, readers) when there are fewer lines than readers and
        utterances are split instead (see the module docstring)."""
        items = [(f"{self.data_list_file}:{i + 1}", line) for i, line in enumerate(self.lists)]
        if self.replay is not None:
            items += self.replay.items(self.seed, self.epoch)
        if self.training and self.conf.get("shuffle", True):
            random.Random(f"list:{self.seed}:{self.epoch}").shuffle(items)
        ranks, rank = (world, rank) if self.partition else (1, 0)
        readers = self.check_readers(ranks, num_workers)
        if len(items) >= readers:
            return items[rank::ranks][worker::num_workers], None
        return items, (rank * num_workers + worker, readers)

    def check_readers(self, ranks: int, num_workers: int) -> int:
        """The number of readers (``ranks`` x ``num_workers``); raises when some would get no
        data: a raw list (one utterance per line) with fewer lines than readers."""
        readers = (ranks if self.partition else 1) * max(1, num_workers)
        lines = len(self.lists) + (self.replay.per_epoch if self.replay is not None else 0)
        if self.data_type != "shard" and lines < readers:
            raise ValueError(f"{self.data_list_file}: {lines} utterances for {ranks} "
                             f"rank(s) x {max(1, num_workers)} DataLoader worker(s): every "
                             f"reader needs at least one; use fewer ranks or workers")
        return readers

    def __iter__(self) -> Iterator[dict]:
        rank, world = self._dist_shape or self._rank_world()
        info = get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        if info is not None:
            torch.set_num_threads(1)  # one core per worker; more only adds contention
            if self.cache_features:
                logger.warning("dataset_conf.cache_features in a DataLoader worker: the worker's "
                               "cache ends with its epoch; iterate in the main process "
                               "(num_workers 0) to keep it")
        stats = PipelineStats(f"epoch {self.epoch} rank {rank} worker {worker}")
        self.last_stats = stats
        items, share = self._my_items(rank, world, worker, num_workers)
        if share is not None and not self._split_logged:
            self._split_logged = True
            logger.info("%s: %d data.list lines for %d readers: reading every line, keeping "
                        "utterances %d mod %d", stats.where, len(items), share[1], share[0],
                        share[1])
        where = f"{self.seed}:{self.epoch}:{rank}:{worker}"
        reading = _Reading(items, share, stats, random.Random(f"features:{where}"))
        yield from self._pipeline(reading, random.Random(f"pass:{where}"))
        stats.log_summary()

    def _samples(self, reading: "_Reading") -> Iterator[dict]:
        """The samples of the reader's list items (only its share of their utterances when
        splitting by utterance: utterance j of line i when (i + j) mod readers is its number)."""
        read = {"scp": sources.scp_samples,
                "shard": functools.partial(sources.shard_samples, need_text=self.need_text),
                "raw": functools.partial(sources.raw_samples, need_text=self.need_text),
                }[self.data_type]
        if reading.share is None:
            yield from read(reading.items, reading.stats)
            return
        reader, readers = reading.share
        for where, line in reading.items:
            first = int(where.rsplit(":", 1)[1]) - 1  # the "file:line" tag of _my_items
            for j, sample in enumerate(read([(where, line)], reading.stats)):
                if (first + j) % readers == reader:
                    yield sample

    def _features(self, reading: "_Reading") -> Iterator[dict]:
        """The stages up to fbank: list items → samples with ``feat`` and ``label``."""
        conf, train, stats = self.conf, self.training, reading.stats
        data = processor.check_audio(self._samples(reading), stats)
        if self.need_text:
            data = processor.tokenize(data, self.tokenizer, stats)
        else:  # recognition: the text is for scoring only, never a reason to drop
            data = (dict(s, label=[]) for s in data)
        data = processor.filter_samples(data, stats, **sub_conf(conf, "filter_conf"))
        data = processor.resample_samples(data, stats, **sub_conf(conf, "resample_conf"))
        if train and conf.get("speed_perturb", False):
            data = processor.speed_perturb(data, reading.feature_rng)
        feats = FeatureConf.from_dataset_conf(conf)
        if not train:
            feats = dataclasses.replace(feats, dither=0.0)
        vtlp = vtlp_range(conf) if train and conf.get("vtlp", False) else None
        return self._fbank(data, stats, feats, vtlp)

    def _fbank(self, samples: Iterable[dict], stats: PipelineStats, feats: FeatureConf,
               vtlp: Optional[Tuple[float, float]] = None) -> Iterator[dict]:
        """fbank, each utterance's dither and VTLP warp from its own seed: (seed, epoch,
        source, key), where the epoch is 0 with the cache (its features are computed once,
        whichever epoch)."""
        epoch = 0 if self.cache_features else self.epoch
        for s in samples:
            rng = random.Random(f"fbank:{self.seed}:{epoch}:{s['src']}:{s['key']}")
            yield from processor.fbank((s,), stats, rng, feats, vtlp)

    def _cached_features(self, reading: "_Reading") -> Iterator[dict]:
        """``_features`` item by item, through the in-memory cache of whole list items."""
        new_frames, stats = 0, reading.stats
        for item in reading.items:
            hit = self._cache.get(item[1])
            if hit is not None:
                samples, counts = hit
                stats.counts.update(counts)
                for s in samples:  # a copy: later stages replace the sample's entries
                    yield dict(s)
                continue
            before = Counter(stats.counts)
            samples = []
            for s in self._features(dataclasses.replace(reading, items=[item])):
                samples.append(dict(s))
                new_frames += s["feat"].numel()
                yield s
            # reached only once the item was read to its end
            self._cache[item[1]] = (samples, stats.counts - before)
        if new_frames:
            logger.info("%s: feature cache holds %d list items (+%.0f MB)", stats.where,
                        len(self._cache), new_frames * 4 / 2 ** 20)

    def _pipeline(self, reading: "_Reading", rng: random.Random) -> Iterator[dict]:
        """The chain of stages, in order (see the module docstring); ``rng`` draws the
        augmentation and shuffling."""
        conf, train, stats = self.conf, self.training, reading.stats
        if self.cache_features:
            data = self._cached_features(reading)
        else:
            data = self._features(reading)
        if train and conf.get("edge_pad", False):
            data = processor.edge_pad_samples(data, rng, **sub_conf(conf, "edge_pad_conf"))
        if train and conf.get("spec_aug", False):
            data = processor.spec_aug_samples(data, rng, **sub_conf(conf, "spec_aug_conf"))
        if train and conf.get("spec_sub", False):
            data = processor.spec_sub_samples(data, rng, **sub_conf(conf, "spec_sub_conf"))
        if train and conf.get("spec_trim", False):
            data = processor.spec_trim_samples(data, rng, **sub_conf(conf, "spec_trim_conf"))
        if train and conf.get("shuffle", True):
            data = processor.shuffle(data, rng, **sub_conf(conf, "shuffle_conf"))
        if conf.get("sort", True):
            data = processor.sort(data, **sub_conf(conf, "sort_conf"))
        batch_conf = sub_conf(conf, "batch_conf")
        if batch_conf.pop("batch_type", "static") == "dynamic":
            batch_conf.pop("batch_size", None)
            data = processor.dynamic_batch(data, **batch_conf)
        else:
            batch_conf.pop("max_frames_in_batch", None)
            data = processor.static_batch(data, **batch_conf)
        return processor.pad_batch(data, stats)
