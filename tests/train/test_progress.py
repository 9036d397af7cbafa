"""The periodic log line: the fixed loss columns, and what a model adds to its loss dict."""
import logging

import torch

from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.progress import EpochProgress, StepTimes, parse_throughput, throughput_line
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


def test_epoch_end_throughput_line_counts_the_epochs_audio_and_batches(caplog, monkeypatch):
    """The epoch-end line holds the epoch's audio (frames x 10 ms), its wall time, their
    ratio and the seconds per batch, and parse_throughput reads the same figures back."""
    clock = iter([100.0, 100.0] + [112.5] * 10)  # the epoch starts at 100 s and ends at 112.5 s
    monkeypatch.setattr("wenet.train.progress.time.time", lambda: next(clock))
    st = TrainState()
    st.batches_done = 2  # resumed after 2 batches: this run's part of the epoch is counted
    progress = EpochProgress(st, StepTimes(), TrainConf.from_configs({}), DistInfo())
    for lengths in ([100, 50], [300], [25, 25, 25, 25]):
        st.batches_done += 1
        progress.add({"loss": torch.tensor(1.0)}, {"feats_lengths": torch.tensor(lengths)})
    st.batches_done += 1  # a batch that was skipped (no add) still took time
    with caplog.at_level(logging.INFO):
        progress.log_epoch_end(st, StepTimes())
    [fig] = parse_throughput("\n".join(r.getMessage() for r in caplog.records))
    audio = (150 + 300 + 100) * 0.01  # seconds: 10 ms frames
    assert fig == {"epoch": 0.0, "audio_s": audio, "wall_s": 12.5,
                   "audio_s_per_s": round(audio / 12.5, 1), "s_per_batch": 12.5 / 4,
                   "batches": 4.0, "peak_mib": None}


def test_throughput_lines_round_trip_with_and_without_cuda_memory():
    lines = [throughput_line(3, 1234.56, 20.0, 40, 5120.4), "noise",
             throughput_line(4, 10.0, 4.0, 3, None)]
    figs = parse_throughput("\n".join(lines))
    assert figs == [
        {"epoch": 3.0, "audio_s": 1234.6, "wall_s": 20.0, "audio_s_per_s": 61.7,
         "s_per_batch": 0.5, "batches": 40.0, "peak_mib": 5120.0},
        {"epoch": 4.0, "audio_s": 10.0, "wall_s": 4.0, "audio_s_per_s": 2.5,
         "s_per_batch": 1.3333, "batches": 3.0, "peak_mib": None}]
