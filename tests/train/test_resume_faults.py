"""Resume and save when the disk lets training down (issue 57): a truncated newest resume
state never makes training start again over good checkpoints, and a full disk during a
save is an error naming the file and the cause, the previous checkpoint intact."""
from __future__ import annotations

import errno
import hashlib
import logging
import os

import pytest
import torch

from tests.train import testlib as T
from tests.train.test_retention import _executor, _fit
from wenet.bin.train import cli
from wenet.train import checkpoint as ckpt
from wenet.train.checkpoint_manager import CheckpointManager
from wenet.train.distributed import DistInfo
from wenet.utils import file_utils


def _digests(d) -> dict:
    return {name: hashlib.sha256((d / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(d)) if name.endswith((".pt", ".yaml"))}


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_only_resume_state_stops_with_what_to_do(tmp_path):
    """keep_last_k 1: after epoch 1 only 1.resume.pt is left; cut in half, resuming must
    not start from scratch (it did: "ignoring unreadable resume state", then
    0.pt and 1.pt retrained over) but stop, naming the file and the way on."""
    _fit(_executor(tmp_path, max_epoch=2, save_interval=0, keep_last_k=1))
    _truncate(tmp_path / "1.resume.pt")
    before = _digests(tmp_path)
    ex = _executor(tmp_path, max_epoch=3, save_interval=0, keep_last_k=1)
    with pytest.raises(ValueError) as err:
        ex.checkpoints.resume(ex)
    message = str(err.value)
    assert f"{tmp_path / '1.resume.pt'} is unreadable" in message
    assert "no intact resume state" in message
    assert f"mv {tmp_path / '1.resume.pt'} {tmp_path / '1.resume.pt'}.bad" in message
    assert f"--checkpoint {tmp_path / '1.pt'}" in message
    assert _digests(tmp_path) == before and ex.state.step == 0
    # doing what it says continues from 1.pt's weights after epoch 1
    os.rename(tmp_path / "1.resume.pt", tmp_path / "1.resume.pt.bad")
    ex = _executor(tmp_path, max_epoch=3, save_interval=0, keep_last_k=1)
    assert ex.checkpoints.resume(ex, str(tmp_path / "1.pt")) == str(tmp_path / "1")
    assert (ex.state.epoch, ex.state.epoch_done, ex.state.step) == (1, True, 8)
    _fit(ex)
    assert ex.state.step == 12 and _digests(tmp_path)["1.pt"] == before["1.pt"]


def test_a_truncated_newest_resume_state_falls_back_to_the_newest_intact_one(tmp_path, caplog):
    """keep_last_k 2 keeps 0.resume.pt: the run goes on from epoch 0, saying so."""
    _fit(_executor(tmp_path, max_epoch=2, save_interval=0, keep_last_k=2))
    _truncate(tmp_path / "1.resume.pt")
    ex = _executor(tmp_path, max_epoch=2, save_interval=0, keep_last_k=2)
    caplog.set_level(logging.WARNING)
    assert ex.checkpoints.resume(ex) == str(tmp_path / "0")
    assert (ex.state.epoch, ex.state.epoch_done, ex.state.step) == (0, True, 4)
    assert f"{tmp_path / '1.resume.pt'} is unreadable" in caplog.text
    assert f"falling back to the newest intact resume state {tmp_path / '0'}" in caplog.text
    _fit(ex)  # epoch 1 again: a complete 1.resume.pt replaces the cut one
    assert ex.state.step == 8
    again = _executor(tmp_path, max_epoch=2, save_interval=0, keep_last_k=2)
    assert again.checkpoints.resume(again) == str(tmp_path / "1")


def test_epoch_checkpoints_without_any_resume_state_are_not_trained_over(tmp_path):
    _fit(_executor(tmp_path, max_epoch=2, save_interval=0, keep_last_k=1))
    os.remove(tmp_path / "1.resume.pt")
    ex = _executor(tmp_path, max_epoch=3, save_interval=0, keep_last_k=1)
    with pytest.raises(ValueError, match=f"--checkpoint {tmp_path / '1.pt'}"):
        ex.checkpoints.resume(ex)


def test_an_unreadable_resume_state_named_by_checkpoint_is_an_error_naming_it(tmp_path):
    _fit(_executor(tmp_path, max_epoch=1, save_interval=0))
    _truncate(tmp_path / "0.resume.pt")
    ex = _executor(tmp_path, max_epoch=2, save_interval=0)
    with pytest.raises(ValueError, match=f"{tmp_path / '0.resume.pt'} is unreadable"):
        ex.checkpoints.resume(ex, str(tmp_path / "0.pt"))


class _DiskFull:
    """A file whose disk fills after ``room`` bytes: the write that would pass it writes
    what fits, then raises ENOSPC, as a write(2) on a full file system does."""

    def __init__(self, f, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.f.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.f.__exit__(*exc)


def _fill_disk_when_writing(monkeypatch, suffix: str, room: int = 600) -> None:
    """Every file whose name ends with ``suffix`` is written to a disk with ``room`` bytes."""
    def full_open(path, mode="r", **kwargs):
        f = open(path, mode, **kwargs)
        return _DiskFull(f, room) if path.split(".tmp.")[0].endswith(suffix) else f
    monkeypatch.setattr(file_utils, "open", full_open, raising=False)


def test_a_full_disk_during_a_save_is_an_error_naming_the_file_and_the_cause(tmp_path,
                                                                             monkeypatch):
    path = tmp_path / "3.pt"
    ckpt.atomic_torch_save({"w": torch.zeros(3)}, str(path))
    before = path.read_bytes()
    _fill_disk_when_writing(monkeypatch, "3.pt")
    with pytest.raises(OSError) as err:  # was torch's "enforce fail ... unexpected pos"
        ckpt.atomic_torch_save({"w": torch.randn(10000)}, str(path))
    assert err.value.errno == errno.ENOSPC
    assert str(err.value).startswith(f"[Errno 28] cannot write {path}: No space left on "
                                     "device (the previous 3.pt, if any, is intact)")
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["3.pt"]


def test_train_py_on_a_full_disk_exits_1_with_one_line_and_epoch_0_intact(tmp_path, capsys,
                                                                         monkeypatch):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=2, num_shards=1, cv_utts=1)
    config = T.write_config(str(tmp_path / "conf.yaml"), max_epoch=2)
    exp = tmp_path / "exp"
    _fill_disk_when_writing(monkeypatch, os.path.join("exp", "1.pt"))
    code = cli(T.train_args(corpus, config, str(exp)))
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.rstrip().splitlines()[-1].startswith(
        f"train.py: error: [Errno 28] cannot write {exp / '1.pt'}: No space left on device")
    assert CheckpointManager(str(exp), DistInfo()).latest() == str(exp / "0")
    assert not [n for n in os.listdir(exp) if n.startswith("1.")]
