"""Checkpoint file names: one parser (wenet/train/checkpoint.py) behind training, averaging
and the results summary."""
from __future__ import annotations

import pytest
import torch
import yaml

from wenet.bin import average_model
from wenet.eval.results import read_epoch_infos
from wenet.train import checkpoint as ckpt
from wenet.train.checkpoint import CheckpointName, parse_checkpoint_name


@pytest.mark.parametrize("name,want", [
    ("3.pt", CheckpointName("epoch", 3, ".pt")),
    ("10.yaml", CheckpointName("epoch", 10, ".yaml")),
    ("3.avg.pt", CheckpointName("epoch", 3, ".avg.pt")),
    ("3.resume.pt", CheckpointName("epoch", 3, ".resume.pt")),
    ("step_40.pt", CheckpointName("step", 40, ".pt")),
    ("step_40.resume.pt", CheckpointName("step", 40, ".resume.pt")),
    ("avg_5.pt", CheckpointName("average", 5, ".pt")),
    ("avg_5.yaml", None), ("train.yaml", None), ("init.pt", None), ("final.zip", None),
    ("3.pt.tmp.1234", None), ("step_.pt", None), ("x3.pt", None), ("3.yaml~", None),
])
def test_parse_checkpoint_name(name, want):
    assert parse_checkpoint_name(name) == want


def _touch(d, names):
    for name in names:
        (d / name).write_bytes(b"")


def test_epoch_checkpoints_lists_epoch_files_in_numeric_order(tmp_path):
    _touch(tmp_path, ["3.pt", "10.pt", "3.resume.pt", "step_40.pt", "avg_2.pt", "7.yaml"])
    assert ckpt.epoch_checkpoints(str(tmp_path)) == [(3, str(tmp_path / "3.pt")),
                                                      (10, str(tmp_path / "10.pt"))]
    assert ckpt.epoch_checkpoints(str(tmp_path), ckpt.INFOS_SUFFIX) == [(7, str(tmp_path / "7.yaml"))]
    assert ckpt.checkpoint_files(str(tmp_path), "step", ckpt.MODEL_SUFFIX) == \
        [(40, str(tmp_path / "step_40.pt"))]
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        ckpt.epoch_checkpoints(str(tmp_path / "nowhere"))


def _experiment(d):
    """What a run leaves: epochs 0..10 with every file, step checkpoints, an average, train.yaml."""
    for n in range(11):
        torch.save({"w": torch.full((2,), float(n))}, d / f"{n}.pt")
        torch.save({"w": torch.full((2,), float(n), dtype=torch.float64)}, d / f"{n}.avg.pt")
        (d / f"{n}.yaml").write_text(yaml.safe_dump({"epoch": n, "cv_loss": abs(n - 4) + 0.5}))
        _touch(d, [f"{n}.resume.pt"])
    for name in ("step_200.pt", "avg_3.pt", "init.pt", "99.pt.tmp.7"):
        torch.save({"w": torch.full((2,), 1000.0)}, d / name)
    (d / "train.yaml").write_text(yaml.safe_dump({"epoch": 500, "cv_loss": 0.0}))


def test_average_model_picks_the_epoch_files(tmp_path):
    _experiment(tmp_path)
    # newest by number, not by name: 10 and 9 (a string sort would say 9 and 8)
    assert average_model.select_checkpoints(str(tmp_path), 2, val_best=False) == [10, 9]
    # lowest cv_loss: epochs 4, 3, 5; train.yaml's cv_loss 0 must not count
    assert average_model.select_checkpoints(str(tmp_path), 3, val_best=True) == [4, 3, 5]
    dst = tmp_path / "out" / "avg_2.pt"
    average_model.main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--num", "2"])
    assert torch.equal(torch.load(dst, weights_only=True)["w"], torch.full((2,), 9.5))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["avg_2.pt"]  # no temporary left


def test_read_epoch_infos_reads_the_epoch_yamls(tmp_path):
    _experiment(tmp_path)
    (tmp_path / "12.yaml").write_text(yaml.safe_dump({"cv_loss": 1.0}))  # epoch from the name
    infos = read_epoch_infos(str(tmp_path))
    assert [i["epoch"] for i in infos] == list(range(11)) + [12]
