"""The tiny training run the guard tests share: a shard corpus (tests/train/testlib.py),
a conformer's executor on the CPU with its model average, and DataLoaders of the lists."""
from __future__ import annotations

from typing import Callable, Dict, Iterable, Iterator, Tuple

import torch

from tests.train import testlib as T
from wenet.dataset.dataset import Dataset
from wenet.models import init_model
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.model_average import ModelAverager
from wenet.train.scheduler import WarmupLR
from wenet.utils.file_utils import read_symbol_table


def configs_for(corpus: Dict[str, str]) -> Dict:
    """testlib's tiny conformer config with the corpus's dimensions; one update per batch."""
    symbols = read_symbol_table(corpus["units"])
    return dict(T.TINY_CONFIG, input_dim=40, output_dim=len(symbols), cmvn_file=None,
                accum_grad=1, average_period=1, log_interval=100)


def executor_for(corpus: Dict[str, str], model_dir: str
                 ) -> Tuple[Executor, Callable[[str, bool], torch.utils.data.DataLoader]]:
    """A tiny conformer's executor on the CPU, and a factory of DataLoaders of the lists."""
    symbols = read_symbol_table(corpus["units"])
    configs = configs_for(corpus)
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
