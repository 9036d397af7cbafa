"""Checkpoints written "on a GPU" load on a CPU-only machine: every tensor a training run
saves (weights, model average, optimizer, scheduler, RNG states with a CUDA one) is
written with the location tag ``cuda:0``, as a GPU run's would be, and then resuming
(CheckpointManager), averaging (average_model.py) and the model loader
(wenet/inference/loader.py) read them here with the exact values; the loader moves a
model to the device it is asked for."""
from __future__ import annotations

import os

import pytest
import torch

from tests.device.guard import META, assert_identical
from tests.device.training import configs_for, executor_for, host_fetch
from wenet.bin import average_model
from wenet.inference.loader import load_model_dir
from wenet.train import checkpoint_manager
from wenet.train.config import save_yaml, train_yaml_configs


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def _cuda_tagged(monkeypatch) -> None:
    """From here on torch.save writes every storage with the location tag of cuda:0."""
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")


@pytest.fixture(scope="module")
def gpu_run(corpus, tmp_path_factory):
    """Two epochs of training whose checkpoints {0,1}.pt (+ .resume.pt, .avg.pt, .yaml)
    are tagged cuda:0, with train.yaml and units.txt: (model dir, the run's executor)."""
    model_dir = str(tmp_path_factory.mktemp("gpu_run"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model (see conftest.one_thread)
    with pytest.MonkeyPatch.context() as mp:
        _cuda_tagged(mp)
        real_rng = checkpoint_manager.capture_rng_state  # plus a GPU's CUDA generator state
        mp.setattr(checkpoint_manager, "capture_rng_state",
                   lambda: {**real_rng(), "cuda": [torch.zeros(16, dtype=torch.uint8)]})
        executor, loader = executor_for(corpus, model_dir)
        executor.conf.keep_last_k = 2
        torch.manual_seed(1)
        for epoch in range(2):
            executor.state.epoch, executor.state.epoch_done = epoch, False
            executor.train_epoch(host_fetch(loader("train", True)))
            executor.state.epoch_done = True
            executor.checkpoints.save_epoch(executor, cv_loss=1.0 - epoch, train_loss=2.0)
    torch.set_num_threads(threads)
    save_yaml(train_yaml_configs(configs_for(corpus), 40, 8, None, corpus["units"]),
              os.path.join(model_dir, "train.yaml"))
    return model_dir, executor


def test_the_files_say_cuda(gpu_run):
    model_dir, _ = gpu_run
    for name in ("1.pt", "1.resume.pt", "1.avg.pt"):
        with pytest.raises(RuntimeError, match="on a CUDA device"):  # no map_location
            torch.load(os.path.join(model_dir, name), weights_only=True)


def test_resume_reads_them_exactly(gpu_run, corpus, tmp_path):
    model_dir, saved = gpu_run
    fresh, _ = executor_for(corpus, str(tmp_path))
    resume = torch.load(os.path.join(model_dir, "1.resume.pt"), map_location="cpu",
                        weights_only=True)
    assert "cuda" in resume["per_rank"][0]["rng"]  # restored only where CUDA is
    fresh.checkpoints.restore(fresh, os.path.join(model_dir, "1"))
    assert (fresh.state.epoch, fresh.state.step) == (1, saved.state.step) == (1, 6)
    assert_identical(saved.model.state_dict(), fresh.model.state_dict())
    assert_identical(saved.optimizer.state_dict(), fresh.optimizer.state_dict())
    assert_identical(saved.averager.state_dict(), fresh.averager.state_dict())
    assert all(t.device.type == "cpu" for t in fresh.averager.avg.values())


def test_average_model_reads_them(gpu_run, tmp_path):
    model_dir, _ = gpu_run
    out = str(tmp_path / "avg_2.pt")
    average_model.main(["--dst_model", out, "--src_path", model_dir, "--num", "2"])
    got = torch.load(out, map_location="cpu", weights_only=True)
    a, b = (torch.load(os.path.join(model_dir, f"{n}.pt"), map_location="cpu",
                       weights_only=True) for n in (0, 1))  # the reference, read by hand
    want = {k: ((a[k].double() + b[k].double()) / 2).to(a[k].dtype)
            if a[k].is_floating_point() else b[k] for k in a}
    assert_identical(want, got)
    out = str(tmp_path / "avg_model.pt")
    average_model.main(["--dst_model", out, "--src_path", model_dir, "--num", "1",
                        "--use_model_avg"])
    assert_identical(gpu_run[1].averager.export(),
                     torch.load(out, map_location="cpu", weights_only=True))


def test_the_model_loader_reads_them_and_moves_the_model_where_asked(gpu_run):
    model_dir, saved = gpu_run
    loaded = load_model_dir(model_dir, checkpoint=os.path.join(model_dir, "1.pt"))
    assert_identical(saved.model.state_dict(), loaded.model.state_dict())
    on_meta = load_model_dir(model_dir, device=META, checkpoint=os.path.join(model_dir, "1.pt"))
    devices = {t.device for t in on_meta.model.state_dict().values()}
    assert devices == {META}
