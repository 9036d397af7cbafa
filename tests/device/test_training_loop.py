"""The data pipeline (shards, speed perturbation, VTLP, fbank with dither, the feature
cache, SpecAugment, shuffle, sort, collate) under the device guard gives exactly the unguarded batches; a few updates of the real
training loop (wenet/train/executor.py: forward, backward, clipping, Adam, the schedule,
the model average, CV) under the guard give exactly the unguarded weights."""
from __future__ import annotations

import pytest
import torch

from tests.device.guard import assert_identical, meta_default
from tests.device.training import executor_for, host_fetch
from tests.train import testlib as T
from wenet.dataset.dataset import Dataset
from wenet.utils.file_utils import read_symbol_table


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def _train(executor, loader):
    """Two epochs (one update per batch) and a CV pass: the model's weights, their running
    average, the number of updates and the CV loss."""
    torch.manual_seed(1)
    for epoch in range(2):
        executor.state.epoch = epoch
        executor.train_epoch(host_fetch(loader("train", True)))
    cv_loss = executor.cv(host_fetch(loader("cv", False)))
    return (executor.model.state_dict(), executor.averager.export(), executor.state.step,
            cv_loss)


def test_training_under_the_guard_equals_training_without_it(corpus, tmp_path):
    ref = _train(*executor_for(corpus, str(tmp_path / "ref")))
    assert ref[2] == 6  # 8 utterances in batches of 3, two epochs
    executor, loader = executor_for(corpus, str(tmp_path / "guarded"))  # on the CPU
    with meta_default():  # the data pipeline, the loop and CV
        guarded = _train(executor, loader)
    assert_identical(ref, guarded)


@pytest.mark.parametrize("changes", [{}, {"speed_perturb": True, "vtlp": True},
                                     {"cache_features": True}],
                         ids=["spec_aug", "speed_perturb_vtlp", "cache_features"])
def test_the_data_pipeline_under_the_guard(corpus, changes):
    symbols = read_symbol_table(corpus["units"])
    conf = dict(T.TINY_CONFIG["dataset_conf"], **changes)

    def batches():
        torch.manual_seed(2)  # the fbank's dither
        data = Dataset("shard", corpus["train"], symbols, conf, None, training=True, seed=3)
        out = []
        for epoch in (0, 1):  # the second from the feature cache, when there is one
            data.set_epoch(epoch)
            out += list(data)
        return out
    ref = batches()
    assert len(ref) == 4 and ref[0]["feats"].dtype == torch.float32
    with meta_default():
        guarded = batches()
    assert_identical(ref, guarded)
