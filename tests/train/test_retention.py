"""What training leaves on disk (wenet/train/checkpoint_manager.py, wenet/bin/average_model.py):
keep_last_k retention, stale temporary files, nothing left by a failed average, sizes."""
from __future__ import annotations

import os
import subprocess

import pytest
import torch
import yaml

from wenet.bin import average_model
from wenet.train import checkpoint as ckpt
from wenet.train.checkpoint_manager import CheckpointManager, format_usage
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.model_average import ModelAverager
from wenet.train.scheduler import WarmupLR

from tests.train import testlib as T

BATCHES = T.constant_batches([1.0, 2.0, 3.0, 4.0])  # 4 updates per epoch


def _executor(model_dir, **conf) -> Executor:
    torch.manual_seed(0)
    model = T.ConstantLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_conf = TrainConf(**dict(dict(accum_grad=1, log_interval=100, save_interval=3,
                                       average_period=1), **conf))
    return Executor(model, opt, WarmupLR(opt, 2), train_conf, torch.device("cpu"), DistInfo(),
                    str(model_dir), averager=ModelAverager(model.state_dict(), 1),
                    train_set=T.ListSet())


def _fit(ex: Executor) -> None:
    ex.fit(lambda epoch: BATCHES, lambda: BATCHES[:1])


EPOCH_MODELS = ["0.pt", "0.yaml", "1.pt", "1.yaml", "2.pt", "2.yaml"]


@pytest.mark.parametrize("keep,kept", [
    (1, ["2.avg.pt", "2.resume.pt"]),
    # epoch 1 ended at update 8: the step checkpoints after it (9, 12) stay
    (2, ["1.avg.pt", "1.resume.pt", "2.avg.pt", "2.resume.pt", "step_12.pt",
         "step_12.resume.pt", "step_9.pt", "step_9.resume.pt"]),
])
def test_keep_last_k_keeps_exactly_the_newest_resume_states(tmp_path, keep, kept):
    """3 epochs of 4 updates, a step checkpoint every 3 updates: the epoch models stay,
    resume states and averages of the newest ``keep`` epochs only; resume still works."""
    _fit(_executor(tmp_path, max_epoch=3, keep_last_k=keep))
    assert sorted(os.listdir(tmp_path)) == sorted(EPOCH_MODELS + kept)
    ex = _executor(tmp_path, max_epoch=4, keep_last_k=keep)
    assert ex.checkpoints.resume(ex) == str(tmp_path / "2")
    assert (ex.state.epoch, ex.state.epoch_done, ex.state.step) == (2, True, 12)
    _fit(ex)
    assert ex.state.step == 16 and os.path.exists(tmp_path / "3.resume.pt")
    assert not os.path.exists(tmp_path / f"{3 - keep}.resume.pt")


def _epoch_files(*epochs_with_resume_state: int, upto: int) -> list:
    """{N}.pt and {N}.yaml of epochs 0..upto, plus {N}.avg.pt and {N}.resume.pt of the given ones."""
    names = [f"{n}{suffix}" for n in range(upto + 1) for suffix in (".pt", ".yaml")]
    return names + [f"{n}{suffix}" for n in epochs_with_resume_state
                    for suffix in (".avg.pt", ".resume.pt")]


def _step_files(*steps: int) -> list:
    return [f"step_{s}{suffix}" for s in steps for suffix in (".pt", ".resume.pt")]


def test_retention_over_epochs_and_steps_keeps_the_files_computed_by_hand(tmp_path):
    """5 updates an epoch, a step checkpoint every 2 updates, keep_last_k 2,
    keep_step_checkpoints 3; run one epoch at a time, each run resuming the last.

    By hand: step checkpoints at updates 2, 4, ..., 20 (no .yaml, no .avg.pt), each
    save keeping the newest three; epochs end at updates 5, 10, 15, 20. Ending epoch
    N >= 2 removes epoch N-2's resume state and average, and the step checkpoints up
    to the end of epoch N-1 (the oldest kept): step_10 after epoch 2, step_14 after epoch 3.
    """
    want = [
        _epoch_files(0, upto=0) + _step_files(2, 4),
        _epoch_files(0, 1, upto=1) + _step_files(6, 8, 10),
        _epoch_files(1, 2, upto=2) + _step_files(12, 14),
        _epoch_files(2, 3, upto=3) + _step_files(16, 18, 20),
    ]
    batches = T.constant_batches([1.0, 2.0, 3.0, 4.0, 5.0])
    for epoch, files in enumerate(want):
        ex = _executor(tmp_path, max_epoch=epoch + 1, save_interval=2, keep_last_k=2,
                       keep_step_checkpoints=3)
        assert ex.checkpoints.resume(ex) == (str(tmp_path / str(epoch - 1)) if epoch else None)
        ex.fit(lambda e: batches, lambda: batches[:1])
        assert ex.state.step == 5 * (epoch + 1)
        assert sorted(os.listdir(tmp_path)) == sorted(files), f"after epoch {epoch}"


def test_the_previous_checkpoint_stays_until_the_new_one_is_complete(tmp_path, monkeypatch):
    ex = _executor(tmp_path, max_epoch=2, save_interval=0)
    real = ckpt.atomic_torch_save

    def failing_second_resume_state(obj, path):
        if path.endswith("1.resume.pt"):
            raise OSError("No space left on device")
        real(obj, path)

    monkeypatch.setattr(ckpt, "atomic_torch_save", failing_second_resume_state)
    with pytest.raises(OSError):
        _fit(ex)
    assert ex.checkpoints.latest() == str(tmp_path / "0")
    assert os.path.exists(tmp_path / "0.avg.pt")


def _reaped() -> int:
    """The pid of a process that has exited (and been waited for)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_stale_temporary_files_are_removed_with_the_bytes_freed(tmp_path, caplog):
    dead = _reaped()
    (tmp_path / "bad_batch").mkdir()
    files = {f"3.pt.tmp.{dead}": 500, f"bad_batch/model.pt.tmp.{dead}": 20,
             f"4.pt.tmp.{os.getpid()}": 10,  # a live writer's
             "notes.tmp.txt": 3, "3.pt": 7}
    for name, size in files.items():
        (tmp_path / name).write_bytes(b"x" * size)
    caplog.set_level("INFO")
    assert CheckpointManager(str(tmp_path), DistInfo()).remove_stale_temp_files() == (2, 520)
    left = sorted(os.path.relpath(os.path.join(r, f), tmp_path)
                  for r, _, fs in os.walk(tmp_path) for f in fs)
    assert left == ["3.pt", f"4.pt.tmp.{os.getpid()}", "notes.tmp.txt"]
    assert "removed 2 temporary file(s)" in caplog.text and "520 bytes freed" in caplog.text


def test_failed_average_leaves_nothing_behind(tmp_path, monkeypatch):
    src = tmp_path / "exp"
    src.mkdir()
    for n in range(2):
        torch.save({"w": torch.full((3,), float(n))}, src / f"{n}.pt")
    before = sorted(os.listdir(src))
    real_save = torch.save

    def dying_save(obj, f, *a, **k):  # half a file, then a full disk
        real_save(obj, f, *a, **k)
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="No space left"):
        average_model.main(["--dst_model", str(tmp_path / "out" / "sub" / "avg_2.pt"),
                            "--src_path", str(src), "--num", "2"])
    assert sorted(os.listdir(tmp_path)) == ["exp"] and sorted(os.listdir(src)) == before


def test_use_model_avg_val_best_chooses_among_the_kept_averages(tmp_path):
    for n, loss in ((0, 1.0), (1, 3.0), (2, 2.0)):  # epoch 0 is best, its average was pruned
        torch.save({"w": torch.full((2,), float(n))}, tmp_path / f"{n}.pt")
        (tmp_path / f"{n}.yaml").write_text(yaml.safe_dump({"epoch": n, "cv_loss": loss}))
    torch.save({"w": torch.full((2,), 20.0, dtype=torch.float64)}, tmp_path / "2.avg.pt")
    dst = tmp_path / "model_avg.pt"
    average_model.main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--use_model_avg",
                        "--val_best"])
    assert torch.equal(torch.load(dst, weights_only=True)["w"], torch.full((2,), 20.0))


def test_model_dir_usage_counts_every_byte_by_kind(tmp_path):
    sizes = {"0.pt": 100, "0.yaml": 10, "0.resume.pt": 1000, "0.avg.pt": 200, "step_3.pt": 50,
             "step_3.resume.pt": 60, "avg_2.pt": 30, "train.yaml": 5, "1.pt.tmp.99": 7,
             "tensorboard/events": 40}
    (tmp_path / "tensorboard").mkdir()
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    os.symlink(tmp_path / "0.pt", tmp_path / "final.pt")  # not counted twice
    assert CheckpointManager(str(tmp_path), DistInfo()).usage() == {
        "total": sum(sizes.values()), "epoch models": 110, "resume states": 1000,
        "running averages": 200, "step checkpoints": 110, "averaged models": 30, "other": 5,
        "temporary": 7, "subdirectories": 40}
    assert format_usage({"total": 3 * 2 ** 20, "resume states": 2 ** 20}) == \
        "3.0 MB (resume states 1.0)"
