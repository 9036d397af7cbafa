"""The periodic log line: the fixed loss columns, and what a model adds to its loss dict."""
import logging

import torch

from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.progress import EpochProgress, StepTimes
from wenet.train.train_state import TrainState


class _Writer:
    def __init__(self):
        self.points = {}

    def add_scalar(self, tag, value, step):
        self.points[tag] = value


def test_log_line_has_window_means_of_every_loss_the_model_returns(caplog):
    writer = _Writer()
    progress = EpochProgress(TrainState(), StepTimes(), TrainConf.from_configs({}), DistInfo(),
                             writer)
    batch = {"feats_lengths": torch.tensor([100, 50])}
    for cr, pruned in ((1.0, None), (3.0, None)):
        out = {"loss": torch.tensor(10.0 + cr), "loss_ctc": torch.tensor(8.0),
               "loss_att": None, "loss_cr": torch.tensor(cr), "loss_pruned": pruned,
               "th_accuracy": 0.5}
        progress.add(out, batch)
    with caplog.at_level(logging.INFO):
        progress.log_batch(TrainState(), lr=1e-3)
    line = caplog.records[-1].getMessage()
    # means over the window's 2 batches; a missing loss_att counts as 0 like before
    assert "loss 12.0000 loss_ctc 8.0000 loss_att 0.0000 loss_cr 2.0000 lr" in line
    assert "loss_pruned" not in line and "th_accuracy" not in line
    assert writer.points["train/loss_cr"] == 2.0 and writer.points["train/loss"] == 12.0
