"""The data pipeline (shards, fbank with dither, SpecAugment, shuffle, sort, collate)
under the device guard gives exactly the unguarded batches; a few updates of the real
training loop (wenet/train/executor.py: forward, backward, clipping, Adam, the schedule,
the model average, CV) under the guard give exactly the unguarded weights."""
from __future__ import annotations

from typing import Iterable, Iterator

import pytest
import torch

from tests.device.guard import assert_identical, meta_default
from tests.train import testlib as T
from wenet.dataset.dataset import Dataset
from wenet.models import init_model
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.model_average import ModelAverager
from wenet.train.scheduler import WarmupLR
from wenet.utils.file_utils import read_symbol_table


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return T.make_corpus(str(tmp_path_factory.mktemp("corpus")), num_utts=8, num_shards=1,
                         cv_utts=3)


def _executor(corpus, model_dir, pin: bool):
    """A tiny conformer's executor on the CPU, and a factory of DataLoaders of the lists."""
    symbols = read_symbol_table(corpus["units"])
    configs = dict(T.TINY_CONFIG, input_dim=40, output_dim=len(symbols), cmvn_file=None,
                   accum_grad=1, average_period=1, log_interval=100)
    torch.manual_seed(0)
    model = init_model(configs)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.002)
    executor = Executor(model, optimizer, WarmupLR(optimizer, 5),
                        TrainConf.from_configs(configs), torch.device("cpu"), DistInfo(),
                        str(model_dir), averager=ModelAverager(model.state_dict(), 1))
    dataset_conf = dict(configs["dataset_conf"], batch_conf={"batch_type": "static",
                                                             "batch_size": 3})

    def loader(name: str, training: bool):
        data = Dataset("shard", corpus[name], symbols, dataset_conf, None, training=training,
                       seed=3)
        return torch.utils.data.DataLoader(data, batch_size=None, num_workers=0,
                                           pin_memory=pin,
                                           generator=torch.Generator().manual_seed(3))
    return executor, loader


def host_fetch(loader: Iterable[dict]) -> Iterator[dict]:
    """The loader's batches, each fetched with the CPU as default device: torch's own
    DataLoader machinery (its seed draw) is not ours to guard; the pipeline is, in
    test_the_data_pipeline_under_the_guard."""
    with torch.device("cpu"):
        it = iter(loader)
    while True:
        with torch.device("cpu"):
            batch = next(it, None)
        if batch is None:
            return
        yield batch


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
    ref = _train(*_executor(corpus, tmp_path / "ref", pin=False))
    assert ref[2] == 6  # 8 utterances in batches of 3, two epochs
    executor, loader = _executor(corpus, tmp_path / "guarded", pin=False)  # on the CPU
    with meta_default():  # the data pipeline, the loop and CV
        guarded = _train(executor, loader)
    assert_identical(ref, guarded)


def test_the_data_pipeline_under_the_guard(corpus):
    symbols = read_symbol_table(corpus["units"])

    def batches():
        torch.manual_seed(2)  # the fbank's dither
        data = Dataset("shard", corpus["train"], symbols, T.TINY_CONFIG["dataset_conf"], None,
                       training=True, seed=3)
        data.set_epoch(1)
        return list(data)
    ref = batches()
    assert len(ref) == 2 and ref[0]["feats"].dtype == torch.float32
    with meta_default():
        guarded = batches()
    assert_identical(ref, guarded)
