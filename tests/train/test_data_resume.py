"""The training data side of exact resume and of rank/worker partitioning
(wenet/dataset/dataset.py): features cached with dither replay after a restart, and no
reader is left without data when data.list has fewer lines than readers."""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Dict, List

import pytest
import torch

from wenet.dataset import dataset as dataset_module
from wenet.dataset.dataset import Dataset

from tests.train import testlib as T

CONF = dict(T.TINY_CONFIG["dataset_conf"], cache_features=True,
            batch_conf={"batch_type": "static", "batch_size": 2})


def _epoch(ds: Dataset, epoch: int) -> List[dict]:
    ds.set_epoch(epoch)
    return list(ds.consume(ds))


def _assert_same_batches(got: List[dict], want: List[dict]) -> None:
    assert [b["keys"] for b in got] == [b["keys"] for b in want]
    for a, b in zip(got, want):
        for name in ("feats", "feats_lengths", "target", "target_lengths"):
            assert torch.equal(a[name], b[name]), name


def test_cached_features_with_dither_replay_after_a_restart(tmp_path):
    """A process that starts at epoch 1 (empty cache: it computes the features again)
    delivers exactly the batches of the process that cached them in epoch 0, dither,
    SpecAugment and shuffling included; also when resuming mid-epoch."""
    corpus = T.make_corpus(str(tmp_path), num_utts=12, num_shards=3, cv_utts=1)
    assert CONF["fbank_conf"]["dither"] > 0 and CONF["spec_aug"] and CONF["shuffle"]
    running = Dataset("shard", corpus["train"], corpus["units"], CONF, seed=7)
    _epoch(running, 0)
    want = _epoch(running, 1)
    restarted = Dataset("shard", corpus["train"], corpus["units"], CONF, seed=7)
    _assert_same_batches(_epoch(restarted, 1), want)
    resumed = Dataset("shard", corpus["train"], corpus["units"], CONF, seed=7)
    resumed.load_state_dict({"epoch": 1, "batches_consumed": 2})
    resumed.set_epoch(1)
    _assert_same_batches(list(resumed.consume(resumed)), want[2:])
    # dither is real: without the cache, epoch 1 draws new noise for the same utterance
    plain = Dataset("shard", corpus["train"], corpus["units"], dict(CONF, cache_features=False,
                                                                     spec_aug=False), seed=7)
    first, second = (_feats(_epoch(plain, e)) for e in (0, 1))
    assert first.keys() == second.keys()
    assert all(not torch.equal(first[k], second[k]) for k in first)


def _feats(batches: List[dict]) -> Dict[str, torch.Tensor]:
    """{key: unpadded features} of some batches."""
    return {key: b["feats"][i, :b["feats_lengths"][i]]
            for b in batches for i, key in enumerate(b["keys"])}


def _reader_keys(monkeypatch, data_list: str, units: str, rank: int, world: int, worker: int,
                 workers: int, data_type: str = "shard") -> List[str]:
    monkeypatch.setattr(dataset_module, "get_worker_info",
                        lambda: SimpleNamespace(id=worker, num_workers=workers))
    threads = torch.get_num_threads()  # a worker sets 1 thread for itself
    try:
        ds = Dataset(data_type, data_list, units, CONF, rank=rank, world_size=world, seed=3)
        return [k for b in _epoch(ds, 0) for k in b["keys"]]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("num_shards,world,workers", [(1, 2, 1), (3, 2, 2)])
def test_fewer_list_lines_than_readers_split_by_utterance(tmp_path, monkeypatch, num_shards,
                                                          world, workers):
    """1 shard for 2 ranks, 3 shards for 2 ranks x 2 workers: every reader gets utterances,
    no utterance is read twice, none is lost."""
    corpus = T.make_corpus(str(tmp_path), num_utts=12, num_shards=num_shards, cv_utts=1)
    shares = [_reader_keys(monkeypatch, corpus["train"], corpus["units"], r, world, w, workers)
              for r in range(world) for w in range(workers)]
    assert all(shares), [len(s) for s in shares]
    every = [k for s in shares for k in s]
    assert sorted(every) == [f"train{i:03d}" for i in range(12)]
    # the same share in every epoch (the feature cache holds only the reader's share)
    again = Dataset("shard", corpus["train"], corpus["units"], CONF, rank=1, world_size=world,
                    seed=3)
    if workers == 1:
        assert sorted(k for b in _epoch(again, 1) for k in b["keys"]) == sorted(shares[1])


def test_raw_list_shorter_than_readers_is_refused_with_the_numbers(tmp_path):
    corpus = T.make_corpus(str(tmp_path), num_utts=2, num_shards=1, cv_utts=1)
    raw = tmp_path / "raw.list"
    raw.write_text(json.dumps({"key": "k1", "wav": str(tmp_path / "x.wav"), "txt": "ab"}) + "\n")
    ds = Dataset("raw", str(raw), corpus["units"], CONF, rank=0, world_size=2)
    with pytest.raises(ValueError, match=r"raw.list: 1 utterances for 2 rank\(s\) x 1 DataLoader"):
        ds.check_readers(2, 0)
    assert ds.check_readers(1, 0) == 1
