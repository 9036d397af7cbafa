"""Checkpoint averaging: exact means, checkpoint selection and clear errors."""
import pytest
import torch
import yaml

from wenet.bin.average_model import main


def _save(d, n, scale, cv_loss=None, avg=False):
    state = {
        "w": torch.full((2, 3), float(scale)),
        "h": torch.tensor([scale * 0.1], dtype=torch.float16),
        "bn.num_batches_tracked": torch.tensor(100 + n),
    }
    torch.save(state, d / f"{n}.pt")
    if cv_loss is not None:
        (d / f"{n}.yaml").write_text(yaml.safe_dump({"epoch": n, "step": 10 * n, "lr": 0.001,
                                                     "cv_loss": cv_loss, "save_time": "x"}))
    if avg:
        torch.save({k: v.to(torch.float64) if v.is_floating_point() else v
                    for k, v in state.items()} | {"w": torch.full((2, 3), scale + 0.5,
                                                                  dtype=torch.float64)},
                   d / f"{n}.avg.pt")


def _load(p):
    return torch.load(p, weights_only=True)


def test_average_of_newest_epochs(tmp_path):
    for n, scale in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 10.0)]:
        _save(tmp_path, n, scale, cv_loss=1.0)
    # decoys that must not count as epoch checkpoints
    torch.save({"w": torch.zeros(2, 3)}, tmp_path / "avg_5.pt")
    torch.save({"w": torch.zeros(2, 3)}, tmp_path / "init.pt")
    torch.save({"w": torch.zeros(2, 3)}, tmp_path / "step_100.pt")
    dst = tmp_path / "out" / "avg_2.pt"
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--num", "2"])
    got = _load(dst)
    assert torch.equal(got["w"], torch.full((2, 3), 7.0))  # mean of epochs 2 and 3
    assert got["h"].dtype == torch.float16
    assert torch.equal(got["h"], torch.tensor([0.7], dtype=torch.float16))
    assert int(got["bn.num_batches_tracked"]) == 103  # from the newest, not averaged


def test_val_best_with_epoch_range(tmp_path):
    losses = {0: 5.0, 1: 1.0, 2: 3.0, 3: 2.0, 4: 0.5}
    for n, loss in losses.items():
        _save(tmp_path, n, float(n), cv_loss=loss)
    dst = tmp_path / "avg.pt"
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--num", "3", "--val_best"])
    got = _load(dst)
    assert torch.allclose(got["w"], torch.full((2, 3), (4 + 1 + 3) / 3), atol=1e-6)
    assert int(got["bn.num_batches_tracked"]) == 104  # best cv_loss
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--num", "2", "--val_best",
          "--max_epoch", "3"])
    got = _load(dst)
    assert torch.equal(got["w"], torch.full((2, 3), 2.0))  # epochs 1 and 3
    assert int(got["bn.num_batches_tracked"]) == 101


def test_float64_accumulation(tmp_path):
    big, small = 1e8, 1.0
    for n, v in enumerate([big, small, -big]):
        torch.save({"w": torch.tensor([v], dtype=torch.float32)}, tmp_path / f"{n}.pt")
    dst = tmp_path / "a.pt"
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--num", "3"])
    # float32 summation in this order would lose the 1.0 entirely
    assert _load(dst)["w"].item() == pytest.approx(1.0 / 3, rel=1e-6)


def test_too_few_checkpoints_is_a_clear_error(tmp_path):
    _save(tmp_path, 0, 1.0, cv_loss=1.0)
    _save(tmp_path, 1, 1.0)  # no yaml: not rankable for val_best
    with pytest.raises(ValueError, match=rf"found only 2 .* in {tmp_path}"):
        main(["--dst_model", str(tmp_path / "a.pt"), "--src_path", str(tmp_path), "--num", "3"])
    with pytest.raises(ValueError, match="found only 1 epoch checkpoints with a cv_loss"):
        main(["--dst_model", str(tmp_path / "a.pt"), "--src_path", str(tmp_path), "--num", "2",
              "--val_best"])


def test_use_model_avg_writes_running_average(tmp_path):
    _save(tmp_path, 0, 1.0, cv_loss=2.0, avg=True)
    _save(tmp_path, 1, 3.0, cv_loss=1.0, avg=True)
    _save(tmp_path, 2, 5.0, cv_loss=4.0, avg=True)
    dst = tmp_path / "a.pt"
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--use_model_avg"])
    got = _load(dst)
    assert got["w"].dtype == torch.float32 and torch.equal(got["w"], torch.full((2, 3), 5.5))
    assert got["h"].dtype == torch.float16
    main(["--dst_model", str(dst), "--src_path", str(tmp_path), "--use_model_avg",
          "--val_best"])
    assert torch.equal(_load(dst)["w"], torch.full((2, 3), 3.5))


def test_mismatched_keys_name_the_file(tmp_path):
    _save(tmp_path, 0, 1.0)
    torch.save({"other": torch.zeros(1)}, tmp_path / "1.pt")
    with pytest.raises(ValueError, match="0.pt and .*1.pt have different keys"):
        main(["--dst_model", str(tmp_path / "a.pt"), "--src_path", str(tmp_path), "--num", "2"])


def test_models_averages_the_named_files(tmp_path):
    """--models: the mean of checkpoints from different runs (a model soup); integer
    tensors from the first file."""
    for run, scale in [("a", 1.0), ("b", 2.5), ("c", 6.0)]:
        (tmp_path / run).mkdir()
        _save(tmp_path / run, 9, scale)
    dst = tmp_path / "soup.pt"
    main(["--dst_model", str(dst), "--models", str(tmp_path / "c" / "9.pt"),
          str(tmp_path / "a" / "9.pt"), str(tmp_path / "b" / "9.pt")])
    got = _load(dst)
    assert torch.equal(got["w"], torch.full((2, 3), 9.5 / 3))
    assert torch.equal(got["h"], torch.tensor([0.95 / 3], dtype=torch.float16))
    assert int(got["bn.num_batches_tracked"]) == 109


def test_models_and_src_path_exclude_each_other(tmp_path):
    _save(tmp_path, 0, 1.0)
    for extra in (["--src_path", str(tmp_path)], ["--use_model_avg"]):
        with pytest.raises(SystemExit):
            main(["--dst_model", str(tmp_path / "a.pt"), "--models", str(tmp_path / "0.pt"),
                  *extra])
    with pytest.raises(SystemExit):
        main(["--dst_model", str(tmp_path / "a.pt")])
