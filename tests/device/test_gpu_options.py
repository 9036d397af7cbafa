"""The GPU options of training, checked on the CPU: which autocast dtype and loss scaler
each device and --use_amp choice gets, --tf32 reaching torch.backends (CUDA only),
--pin_memory's default, asynchronous copies only from pinned memory, and the warning
with the fix when dataset_conf.cache_features keeps a GPU's data pipeline in-process."""
from __future__ import annotations

import logging
import types

import pytest
import torch

from wenet.bin import train
from wenet.train import device as dev
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


@pytest.mark.parametrize("choice,bf16_gpu,want_dtype,want_scaler", [
    ("bf16", True, torch.bfloat16, False), ("fp16", True, torch.float16, True),
    ("none", True, None, False), ("auto", True, torch.bfloat16, False),
    ("auto", False, None, False)])
@pytest.mark.filterwarnings("ignore:.*CUDA is not available")  # this machine has no GPU
def test_precision_on_cuda(monkeypatch, choice, bf16_gpu, want_dtype, want_scaler):
    """bf16 (and --use_amp auto on a GPU with native bf16) trains without a scaler; fp16
    gets torch.amp.GradScaler("cuda"); autocast is torch.amp's for the cuda device type.
    The fake GPU emulates bf16 where it has none (V100, T4): torch's default answer is then
    True, and auto must not take it."""
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return bf16_gpu or including_emulation
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    dtype = dev.amp_dtype_for(choice, CUDA)
    assert dtype is want_dtype
    scaler = dev.grad_scaler_for(CUDA, dtype)
    assert (type(scaler) is torch.amp.GradScaler) == want_scaler
    if want_scaler:
        assert scaler._device == "cuda"
    ctx = dev.autocast_for(CUDA, dtype)
    if dtype is None:
        assert not isinstance(ctx, torch.amp.autocast)
    else:
        assert isinstance(ctx, torch.amp.autocast)
        assert (ctx.device, ctx.fast_dtype) == ("cuda", dtype)


def test_precision_on_cpu_computes_in_the_chosen_dtype():
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    for choice, want in (("bf16", torch.bfloat16), ("none", torch.float32)):
        dtype = dev.amp_dtype_for(choice, CPU)
        with dev.autocast_for(CPU, dtype):
            assert layer(x).dtype == want
        assert dev.grad_scaler_for(CPU, dtype) is None
    scaler = dev.grad_scaler_for(CPU, dev.amp_dtype_for("fp16", CPU))
    assert type(scaler) is torch.amp.GradScaler and scaler._device == "cpu"


@pytest.fixture
def restore_tf32():
    b = torch.backends
    saved = (b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision,
             b.cudnn.rnn.fp32_precision)
    yield
    b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision, \
        b.cudnn.rnn.fp32_precision = saved


def _tf32_flags():
    b = torch.backends
    return (b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision,
            b.cudnn.rnn.fp32_precision)


@pytest.mark.usefixtures("restore_tf32")
def test_tf32_flags_are_set_on_cuda_only():
    assert dev.set_tf32(CUDA, True)
    assert _tf32_flags() == ("tf32",) * 3
    assert dev.set_tf32(CUDA, False)
    assert _tf32_flags() == ("ieee",) * 3
    assert not dev.set_tf32(CPU, True)  # the CPU has no TF32: nothing changes
    assert _tf32_flags() == ("ieee",) * 3


def test_train_py_defaults_and_the_tf32_flag_reaching_torch_backends(monkeypatch):
    """--tf32 true and --pin_memory auto by default (a bare --pin_memory is true); _train
    hands --tf32 with the training device to set_tf32 first thing."""
    base = ["--config", "c", "--model_dir", "d", "--train_data", "t", "--cv_data", "v",
            "--symbol_table", "u"]
    parse = train.get_parser().parse_args
    assert (parse(base).tf32, parse(base).pin_memory) == ("true", "auto")
    assert parse(base + ["--pin_memory"]).pin_memory == "true"
    seen = []

    class Stop(Exception):
        pass

    def stop(*args):
        raise Stop
    monkeypatch.setattr(train, "training_device", lambda gpu, rank: CUDA)
    monkeypatch.setattr(train, "set_tf32", lambda device, on: seen.append((device, on)))
    monkeypatch.setattr(train, "init_configs", stop)
    for flag, on in (("true", True), ("false", False)):
        with pytest.raises(Stop):
            train._train(parse(base + ["--tf32", flag]), DistInfo())
        assert seen.pop() == (CUDA, on)


@pytest.mark.parametrize("choice,device,want", [
    ("auto", CUDA, True), ("auto", CPU, False), ("true", CPU, True), ("false", CUDA, False)])
def test_pin_memory_choice(choice, device, want):
    assert dev.pin_memory_for(choice, device) is want


@pytest.mark.parametrize("pinned", [True, False])
def test_batches_are_copied_asynchronously_only_from_pinned_memory(monkeypatch, pinned):
    """The executor's four inputs go through to_device: non_blocking exactly when pinned."""
    copies = []
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        copies.append(kwargs.get("non_blocking"))
        return real_to(self, *args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *a: pinned)
    monkeypatch.setattr(torch.Tensor, "to", to)
    ex = Executor(torch.nn.Linear(1, 1), None, None, TrainConf(), CPU, DistInfo(), ".",
                  checkpoints=object())
    batch = {"feats": torch.zeros(1, 2, 3), "feats_lengths": torch.tensor([2]),
             "target": torch.zeros(1, 1, dtype=torch.long), "target_lengths": torch.tensor([1])}
    inputs = ex._inputs(batch)
    assert copies == [pinned] * 4
    assert all(torch.equal(a, batch[k]) for a, k in zip(inputs, ("feats", "feats_lengths",
                                                                 "target", "target_lengths")))


def _loaders(cache_features: bool, device, num_workers=4, pin="auto"):
    args = types.SimpleNamespace(num_workers=num_workers, pin_memory=pin, prefetch=2, seed=1)
    data = types.SimpleNamespace(cache_features=cache_features,
                                 check_readers=lambda world, workers: None)
    make_train, make_cv = train.init_dataloaders(args, DistInfo(), data, data, device)
    return make_train(0), make_cv()


def test_cache_features_on_cuda_warns_with_the_fix(caplog):
    with caplog.at_level(logging.INFO):
        loader, cv = _loaders(True, CUDA)
    assert (loader.num_workers, loader.pin_memory, cv.num_workers) == (0, True, 0)
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1
    assert ("--override_config 'dataset_conf.cache_features false' --num_workers 4"
            in warning[0].getMessage())
    caplog.clear()
    with caplog.at_level(logging.INFO):
        loader, _ = _loaders(True, CPU)  # on the CPU it is the usual choice: no warning
    assert (loader.num_workers, loader.pin_memory) == (0, False)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    loader, _ = _loaders(False, CUDA, num_workers=2)  # without the cache the workers stay
    assert (loader.num_workers, loader.pin_memory, loader.prefetch_factor) == (2, True, 2)
