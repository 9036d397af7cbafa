"""Resume in-process (wenet/train/checkpoint_manager.py) and what the loop reports (wenet/train/progress.py)."""
from __future__ import annotations

import logging

import pytest
import torch
import yaml

from wenet.bin.train import get_parser
from wenet.models import init_model
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.progress import eta, fmt_eta
from wenet.train.scheduler import WarmupLR
from wenet.train.train_state import TrainState

from tests.train import testlib as T


def _executor(tmp_path, seed: int) -> Executor:
    configs = dict(T.TINY_CONFIG, input_dim=40, output_dim=len(T.LETTERS) + 3, cmvn_file=None)
    torch.manual_seed(seed)
    model = init_model(configs)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    return Executor(model, opt, WarmupLR(opt, 5), TrainConf(accum_grad=2, log_interval=100),
                    torch.device("cpu"), DistInfo(), str(tmp_path))


def _batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [{"keys": [f"u{seed}_{i}"], "feats": torch.randn(2, 60, 40, generator=g),
             "feats_lengths": torch.tensor([60, 45]), "target": torch.randint(2, 7, (2, 3), generator=g),
             "target_lengths": torch.tensor([3, 2])} for i in range(n)]


def test_restored_executor_continues_bitwise(tmp_path):
    """Dropout draws from the global RNG: only with weights, Adam moments, schedule and
    RNG all restored do the next updates give the same bytes."""
    ref = _executor(tmp_path, seed=0)
    ref.train_epoch(_batches(4, seed=1))
    base = str(tmp_path / "step_2")
    ref.checkpoints.save(ref, base)
    ref.train_epoch(_batches(4, seed=2))

    other = _executor(tmp_path, seed=5)
    other.checkpoints.restore(other, base)
    assert (other.state.step, other.state.batches_done) == (2, 4)
    other.train_epoch(_batches(4, seed=2))
    other.state.train_seconds = ref.state.train_seconds  # wall time: the only counter that differs
    assert other.state == ref.state
    T.assert_same_state(other.model.state_dict(), ref.model.state_dict())
    assert other.lr == ref.lr


def test_checkpoint_without_resume_state_loads_weights_and_epoch(tmp_path):
    """A ``{N}.pt`` + ``{N}.yaml`` pair (older runs, WeNet) still loads: training goes on after N."""
    source = _executor(tmp_path / "old", seed=3)
    (tmp_path / "old").mkdir()
    torch.save({f"module.{k}": v for k, v in source.model.state_dict().items()},
               tmp_path / "old" / "7.pt")
    (tmp_path / "old" / "7.yaml").write_text(yaml.safe_dump({"epoch": 7, "step": 70, "cv_loss": 1.0}))
    ex = _executor(tmp_path, seed=4)
    assert ex.checkpoints.resume(ex) is None  # no resume state: not a checkpoint to continue
    ex.checkpoints.resume(ex, str(tmp_path / "old" / "7.pt"))
    T.assert_same_state(ex.model.state_dict(), source.model.state_dict())
    assert (ex.state.epoch, ex.state.epoch_done, ex.state.step) == (7, True, 70)


def test_eta_and_its_format():
    st = TrainState(epoch=1, batches_done=30, batches_per_epoch=100)
    assert eta(st, per_batch=2.0, max_epoch=3) == (140.0, 340.0)
    assert eta(TrainState(batches_done=5), 2.0, 3) == (None, None)  # first epoch: length unknown
    assert [fmt_eta(s) for s in (3725.9, None, float("inf"))] == ["1:02:05", "?", "?"]


class _Recorder:
    def __init__(self):
        self.points = []

    def add_scalar(self, tag, value, step):
        self.points.append((tag, value, step))


class _KnownLoss(torch.nn.Module):
    """loss = the batch's feature value; loss_ctc twice that; no attention loss."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, feats, feats_lengths, target, target_lengths):
        loss = feats.mean() + 0 * self.w.sum()
        return {"loss": loss, "loss_ctc": 2 * loss.detach(), "loss_att": None}


def test_log_lines_average_the_batches_since_the_previous_line(tmp_path, caplog):
    model = _KnownLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = _Recorder()
    ex = Executor(model, opt, WarmupLR(opt, 2), TrainConf(accum_grad=1, log_interval=2),
                  torch.device("cpu"), DistInfo(), str(tmp_path), writer=writer)
    batches = [{"feats": torch.full((1, 5, 4), v), "feats_lengths": torch.tensor([5]),
                "target": torch.zeros(1, 1, dtype=torch.long), "target_lengths": torch.tensor([1])}
               for v in (1.0, 2.0, 3.0, 4.0)]
    caplog.set_level(logging.INFO)
    ex.train_epoch(batches)
    losses = [(v, s) for tag, v, s in writer.points if tag == "train/loss"]
    assert losses == [(pytest.approx(1.5), 2), (pytest.approx(3.5), 4)]
    assert [(v, s) for tag, v, s in writer.points if tag == "train/loss_ctc"] == [
        (pytest.approx(3.0), 2), (pytest.approx(7.0), 4)]
    assert "epoch 0 batch 4 step 4: loss 3.5000 loss_ctc 7.0000 loss_att 0.0000" in caplog.text
    assert "epoch 0: 4 batches, step 4, skipped so far: 0 non-finite, 0 OOM" in caplog.text


def test_units_file_option_has_both_wenet_names():
    base = ["--config", "c", "--model_dir", "m", "--train_data", "t", "--cv_data", "v"]
    assert get_parser().parse_args(base + ["--symbol_table", "u.txt"]).symbol_table == "u.txt"
    assert get_parser().parse_args(base + ["--dict", "u.txt"]).symbol_table == "u.txt"
